"""Functions the tests run inside a fresh kernel (see tests.harness.Kernel)."""
