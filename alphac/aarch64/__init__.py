"""AArch64 target."""
