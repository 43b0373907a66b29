"""The tools around the compiler, apart from its passes: one module per `alphac` command that
is not a compilation (launch, verify, ckpt, eval, export, slurm, k8s, plot, trace), the annotated
`--emit asm` listings, the functions' filter executables (mathexe) and the generated
documentation (`python -m alphac.tools.docs`); what the launchers share: the run record (record),
a built deployment's table (table), the roles' processes (supervise)."""
