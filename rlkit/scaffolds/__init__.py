"""rlkit.scaffolds"""
