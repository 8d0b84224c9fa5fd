"""rlkit.validate"""
