"""Hidden tests of log-error-count: /app/error_count.txt holds the number of ERROR entries."""

import hashlib
from pathlib import Path

LOG = Path("/app/logs/app.log")
OUTPUT = Path("/app/error_count.txt")
LOG_SHA256 = "9683129c20137a05c611ffabd8cfcf77b69d676a3b2572247e1f186a497086a6"
EXPECTED_ERRORS = 5


def test_log_is_unchanged():
    """The log is the one the task shipped (the count must come from it)."""
    assert hashlib.sha256(LOG.read_bytes()).hexdigest() == LOG_SHA256


def test_output_file_exists():
    """The count was written where the task asked."""
    assert OUTPUT.is_file(), f"{OUTPUT} is missing"


def test_count_is_the_number_of_error_entries():
    """Only entries whose level is ERROR count, not messages that mention it."""
    assert OUTPUT.read_text() == f"{EXPECTED_ERRORS}\n"
