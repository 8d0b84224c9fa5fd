"""rlkit.ops"""
