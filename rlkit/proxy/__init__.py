"""rlkit.proxy"""
