"""Distribution as a compiler transformation.

`deployment` checks how a learner is split (membership, topology, samples, combine tree,
strategy, placement, targets, memory); `plan` composes the strategy from the five operations
(partition, replicate, transfer, combine, advance a version), projects the step to every role
and checks the projections; `execute` runs a plan in one process, role by role, as the oracle of
the distributed runtime.
"""
