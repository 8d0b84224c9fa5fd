from verkit import compare, max_version


def test_equal():
    assert compare("1.2.3", "1.2.3") == 0


def test_numeric_minor():
    assert compare("1.10.0", "1.9.0") == 1
    assert compare("1.9.0", "1.10.0") == -1


def test_numeric_major():
    assert compare("10.0.0", "9.99.99") == 1


def test_prerelease_lower():
    assert compare("1.0.0-alpha", "1.0.0") == -1
    assert compare("1.0.0", "1.0.0-rc.1") == 1


def test_prerelease_chain():
    chain = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta",
             "1.0.0-beta.2", "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0"]
    for lower, higher in zip(chain, chain[1:]):
        assert compare(lower, higher) == -1, (lower, higher)
        assert compare(higher, lower) == 1, (higher, lower)


def test_max_version():
    assert max_version(["1.2.0", "1.10.0", "1.9.9", "1.10.0-rc.1"]) == "1.10.0"
