from confkit import loads


def test_sections():
    assert loads("[a]\nx = 1\n[b]\ny = 2\n") == {"a": {"x": "1"}, "b": {"y": "2"}}
