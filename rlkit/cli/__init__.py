"""rlkit.cli"""
