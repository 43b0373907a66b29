"""The tools around the compiler, apart from its passes: one module per `alphac` command that
is not a compilation (launch, verify, ckpt, eval, export, slurm, k8s, plot, trace), the annotated
`--emit asm` listings, the functions' filter executables (mathexe) and the generated
documentation (`python -m alphac.tools.docs`); and what the launchers share: the run record's
format, keys and verifier (record), a built deployment's table (table) and the roles'
processes (supervise), which launch, slurm, k8s, plot and trace import."""
