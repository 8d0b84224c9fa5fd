"""rlkit.tasks"""
