"""The browser tests: a package, so that their servers, browser and project copy (tests/browser/conftest.py's
package-scoped fixtures) are stopped as soon as its last test ends, not when the worker's whole session does."""
