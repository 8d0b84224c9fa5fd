"""rlkit.monitor"""
