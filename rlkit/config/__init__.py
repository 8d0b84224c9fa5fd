"""rlkit.config"""
