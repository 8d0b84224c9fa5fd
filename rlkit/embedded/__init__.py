"""rlkit.embedded"""
