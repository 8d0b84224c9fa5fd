import pytest

from cachekit import LRUCache


def test_basic():
    cache = LRUCache(2)
    cache.put("a", 1)
    assert cache.get("a") == 1
    assert cache.get("zzz") is None


def test_get_refreshes():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1
    cache.put("c", 3)
    assert "a" in cache and "c" in cache and "b" not in cache


def test_put_refreshes():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("a", 10)
    cache.put("c", 3)
    assert cache.get("a") == 10
    assert "b" not in cache


def test_miss_does_not_insert():
    cache = LRUCache(2)
    assert cache.get("x", 5) == 5
    assert "x" not in cache and len(cache) == 0


def test_bad_capacity():
    with pytest.raises(ValueError):
        LRUCache(0)
