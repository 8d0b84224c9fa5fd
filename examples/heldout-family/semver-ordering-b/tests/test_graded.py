from verkit import compare, max_version


def test_equal():
    assert compare("3.4.5", "3.4.5") == 0
    assert compare("3.4.5-rc.2", "3.4.5-rc.2") == 0


def test_numeric_minor():
    assert compare("2.12.0", "2.8.0") == 1
    assert compare("2.8.0", "2.12.0") == -1


def test_numeric_major():
    assert compare("11.0.0", "2.50.50") == 1


def test_prerelease_lower():
    assert compare("2.0.0-beta", "2.0.0") == -1
    assert compare("2.0.0", "2.0.0-rc.3") == 1


def test_prerelease_chain():
    chain = ["3.1.0-a", "3.1.0-a.7", "3.1.0-a.7.1", "3.1.0-a.z", "3.1.0-b.3",
             "3.1.0-b.20", "3.1.0-b.x", "3.1.0-rc", "3.1.0"]
    for lower, higher in zip(chain, chain[1:]):
        assert compare(lower, higher) == -1, (lower, higher)
        assert compare(higher, lower) == 1, (higher, lower)


def test_max_version():
    assert max_version(["2.8.0", "2.12.0-rc.2", "2.12.0", "2.9.11"]) == "2.12.0"
