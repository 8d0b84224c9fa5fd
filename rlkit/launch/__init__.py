"""rlkit.launch"""
