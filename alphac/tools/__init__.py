"""The tools around the compiler, apart from its passes: `alphac launch` (run a built deployment
on this machine and write its run record), `alphac verify` (rebuild from source and check every
hash), `alphac ckpt show` (read a checkpoint), the annotated listings of `--emit asm`, and the
generated documentation (`python -m alphac.tools.docs`)."""
