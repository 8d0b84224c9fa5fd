"""Version strings: MAJOR.MINOR.PATCH[-PRERELEASE]."""


def parse(version):
    core, _, prerelease = version.partition("-")
    major, minor, patch = core.split(".")
    return major, minor, patch, prerelease


def compare(a, b):
    """-1 if a < b, 0 if equal, 1 if a > b."""
    key_a, key_b = parse(a), parse(b)
    return (key_a > key_b) - (key_a < key_b)


def max_version(versions):
    best = None
    for version in versions:
        if best is None or compare(version, best) > 0:
            best = version
    return best
