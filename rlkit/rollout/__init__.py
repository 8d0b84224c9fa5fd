"""rlkit.rollout"""
