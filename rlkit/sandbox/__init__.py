"""rlkit.sandbox"""
