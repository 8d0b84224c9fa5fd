from cachekit.lru import LRUCache

__all__ = ["LRUCache"]
