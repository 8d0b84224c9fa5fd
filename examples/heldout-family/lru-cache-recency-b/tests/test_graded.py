import pytest

from cachekit import LRUCache


def test_basic():
    cache = LRUCache(3)
    cache.put("k", 5)
    assert cache.get("k") == 5
    assert cache.get("nope") is None


def test_get_refreshes():
    cache = LRUCache(3)
    cache.put("x", 10)
    cache.put("y", 20)
    cache.put("z", 30)
    assert cache.get("x") == 10
    cache.put("w", 40)
    assert "x" in cache and "z" in cache and "w" in cache and "y" not in cache


def test_put_refreshes():
    cache = LRUCache(3)
    cache.put("x", 10)
    cache.put("y", 20)
    cache.put("z", 30)
    cache.put("x", 100)
    cache.put("w", 40)
    assert cache.get("x") == 100
    assert "y" not in cache and "z" in cache and "w" in cache


def test_miss_does_not_insert():
    cache = LRUCache(3)
    assert cache.get("q", -1) == -1
    assert "q" not in cache and len(cache) == 0


def test_bad_capacity():
    with pytest.raises(ValueError):
        LRUCache(-2)
