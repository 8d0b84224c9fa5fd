"""rlkit.train"""
