"""Diagnostics: source positions, coded messages, and their rendering.

Every error alphac reports about its input is a `Diagnostic` with a code from `CODES` (the one
table of codes, each with a title and an explanation that `alphac explain CODE` prints), a span in
a `Source`, a message, and an optional hint. Passes append to a `Sink` and keep going where they
can, so one run reports several errors; the driver renders them like a good C compiler:

    bad.alpha:3:12: error[E0020]: unknown name `wq`
        3 | loss(i) = wq * x[i]
          |           ^^
        = hint: did you mean `w`?

Guarantees: rendering is deterministic (no paths beyond the one given, no time); a span is
always clamped into its source, so a bad input can never make the renderer raise.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Source:
    """One input text and the name it is reported under."""
    name: str
    text: str

    def line_col(self, offset: int) -> tuple[int, int]:
        offset = max(0, min(offset, len(self.text)))
        line = self.text.count("\n", 0, offset) + 1
        col = offset - (self.text.rfind("\n", 0, offset) + 1) + 1
        return line, col

    def line_text(self, line: int) -> str:
        lines = self.text.split("\n")
        return lines[line - 1] if 1 <= line <= len(lines) else ""


@dataclass(frozen=True)
class Span:
    source: Source
    start: int
    end: int

    def to(self, other: "Span") -> "Span":
        return Span(self.source, min(self.start, other.start), max(self.end, other.end))

    @property
    def line_col(self) -> tuple[int, int]:
        return self.source.line_col(self.start)


@dataclass(frozen=True)
class Diagnostic:
    code: str
    span: Span | None
    message: str
    hint: str | None = None
    severity: str = "error"          # "error" | "warning"

    def render(self) -> str:
        tag = f"{self.severity}[{self.code}]"
        if self.span is None:
            out = f"alphac: {tag}: {self.message}"
            return out + (f"\n    = hint: {self.hint}" if self.hint else "")
        src = self.span.source
        line, col = self.span.line_col
        text = src.line_text(line).replace("\t", " ")
        end_line, _ = src.line_col(max(self.span.start, self.span.end - 1))
        width = max(1, (self.span.end - self.span.start) if end_line == line else len(text) - col + 1)
        width = min(width, max(1, len(text) - col + 1))
        gutter = " " * len(str(line))
        out = [f"{src.name}:{line}:{col}: {tag}: {self.message}",
               f"    {line} | {text}",
               f"    {gutter} | {' ' * (col - 1)}{'^' * width}"]
        if self.hint:
            out.append(f"    {gutter} = hint: {self.hint}")
        return "\n".join(out)


@dataclass
class Sink:
    """Collects diagnostics; passes check `sink.ok` before handing work to the next pass."""
    items: list[Diagnostic] = field(default_factory=list)

    def error(self, code: str, span: Span | None, message: str, hint: str | None = None) -> None:
        assert code in CODES, code
        self.items.append(Diagnostic(code, span, message, hint))

    def warning(self, code: str, span: Span | None, message: str, hint: str | None = None) -> None:
        assert code in CODES, code
        self.items.append(Diagnostic(code, span, message, hint, "warning"))

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.items if d.severity == "error"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def sorted(self) -> list[Diagnostic]:
        def key(d: Diagnostic):
            if d.span is None:
                return ("", 0, d.code, d.message)
            return (d.span.source.name, d.span.start, d.code, d.message)
        return sorted(self.items, key=key)


class CompileError(Exception):
    """Raised by the driver when a pass leaves errors in its sink."""

    def __init__(self, diagnostics: list[Diagnostic]):
        super().__init__("\n".join(d.render() for d in diagnostics))
        self.diagnostics = diagnostics


class BuildError(Exception):
    """A build that cannot be done (an unsupported target, a name a checkpoint cannot record)."""


# The one table of diagnostic codes: code -> (title, explanation). `alphac explain` prints these,
# docs/diagnostics.md is generated from them, and every code has a golden test in
# tests/test_diagnostics.py.
CODES: dict[str, tuple[str, str]] = {
    "E0000": ("cannot read the input",
              "The file does not exist or cannot be read, is not a regular file (a directory, "
              "a FIFO or a device is refused before reading: it could block or never end), or "
              "is larger than 1 MiB (1,048,576 bytes), the bound on one source file."),
    # -- lexical ------------------------------------------------------------------------------
    "E0001": ("unexpected character",
              "The character cannot start any token of Alpha. Alpha source is ASCII: names, "
              "numbers, strings in double quotes, `#` comments and the punctuation "
              "+ - * / ^ = ( ) [ ] { } , : ; ."),
    "E0002": ("unterminated string",
              "A string literal (used for `load(\"file.npy\")`) has no closing `\"` on its line."),
    "E0003": ("malformed number",
              "A numeric literal is not a decimal number (`12`, `0.5`, `1e-8`) or a hexadecimal "
              "float (`0x1.8p3`). Numbers are read as the nearest binary64."),
    # -- syntax -------------------------------------------------------------------------------
    "E0004": ("number out of range",
              "A numeric literal is too large for binary64: its nearest binary64 is infinity "
              "(`1e309`, `0x1p1024`, an integer of 310 digits), and the contract keeps every "
              "value finite. The largest finite binary64 is 0x1.fffffffffffffp1023, about "
              "1.7976931348623157e308."),
    "E0005": ("name too long",
              "A name (of a learner, a param, a state, a data array, a constant, a `let`, a "
              "deployment or a role) has more than 128 characters, the language's limit. "
              "Checkpoint manifests record state and role names whole (alphac.formats.NAME_MAX), "
              "so every name a program can have is one a checkpoint can restore."),
    "E0010": ("unexpected token",
              "The parser expected something else here. The message says what it expected. "
              "A file starts with `learner NAME` and continues with declarations "
              "(data, const, param, state, loss, predict, update, deployment), one per line."),
    "E0011": ("unclosed bracket",
              "An opening `(`, `[` or `{` has no matching closing bracket."),
    "E0012": ("nested too deeply",
              "An expression nests more than 100 levels of brackets (or of unary minus signs), "
              "or a deployment's combine tree more than 100 levels of parentheses. Name the "
              "inner parts of an expression with `let` or `const`. Chains of operators "
              "(`a + b + c ...`) and of `let`s have no depth limit."),
    # -- names --------------------------------------------------------------------------------
    "E0020": ("unknown name",
              "The name is not declared. Names must be declared before they are used: data, "
              "const, param and state at the top level, `let` inside a block."),
    "E0021": ("name declared twice",
              "Each name may be declared once: data, const, param, state and let names share "
              "one namespace, and may not shadow the builtins (sqrt, dot, sum, grad, load)."),
    # -- shapes and types ---------------------------------------------------------------------
    "E0030": ("shapes do not match",
              "An elementwise operation needs operands of the same shape, or a scalar with "
              "anything. Alpha does no other broadcasting."),
    "E0031": ("value has the wrong shape",
              "The value assigned (or given as an initial value) does not have the declared "
              "shape of its target. A scalar initial value fills every coordinate."),
    "E0032": ("index out of range",
              "A constant index must be at least 0 and less than the dimension it indexes; a "
              "slice `lo:hi` must have 0 <= lo < hi <= the dimension (not empty), and a "
              "comprehension's range `lo..hi` lo < hi."),
    "E0033": ("bad indexing",
              "Only arrays can be indexed, with at most one index per dimension. An index is "
              "a constant integer expression (literals, a comprehension's variable, integral "
              "constants, len(v), min, max, + - * and / rounding down), a slice `lo:hi` of "
              "them, or the sample index of `loss(i)` (or `predict(i)`); the sample index may "
              "only index data, as its first index. In the loss, one element of the sample's "
              "data may be a declared param's, state's or const's only index (`E[tok[i]]`, "
              "`E[tok[i, 2]]`: an embedding), and a param indexed so is read there no other way."),
    "E0034": ("ragged array literal",
              "Every row of an array literal must have the same length."),
    "E0035": ("sample counts disagree",
              "Every `data` declaration is per sample: its first dimension is the sample count, "
              "and all data must agree on it."),
    "E0036": ("bad type",
              "A type is `f64` (a scalar) or `f64[D1, D2, ...]` with positive integer "
              "dimensions (at most 2). Data may be declared `i64[...]` instead (indices and "
              "labels): then it holds whole numbers within 2^53 in magnitude, and a const, "
              "param or state is never i64."),
    "E0037": ("array of matrices",
              "Array literals (`[a, b, c]`) and comprehensions (`[f(j) for j in 0..4]`) of "
              "constants are folded at compile time; of computed values, scalars make a vector "
              "and vectors of one length a matrix (in the loss). Their items cannot be matrices: "
              "values have at most 2 dimensions."),
    "E0038": ("data outside the loss",
              "Data is per sample; only the loss reads it, through the sample index."),
    "E0039": ("not a constant",
              "Constants, data and initial values are computed at compile time; they may use "
              "numbers, array literals and earlier constants, but not params or state."),
    # -- numerical contract -------------------------------------------------------------------
    "E0040": ("operation not in the numerical contract",
              "The contract holds the correctly rounded binary64 operations + - * / sqrt, the "
              "exact max, min, abs and relu, the correctly rounded exp, log, log1p, expm1, "
              "tanh, sin, cos and pow (the same bits on every target: docs/language.md), the "
              "compositions sigmoid and softplus, and the reductions dot and sum (left folds). "
              "Anything else, such as atan, is not an operation of Alpha (yet)."),
    "E0041": ("unsupported exponent",
              "`^` takes a positive integer literal exponent (at most 8); `u^n` means the left "
              "product u * u * ... * u. Any other power is `pow(u, v)`, correctly rounded."),
    "E0042": ("wrong number of arguments",
              "The builtin was called with the wrong number of arguments: sqrt(u), dot(u, v), "
              "sum(u), grad(param), load(\"file.npy\"), f64(tok[i, t]) (one read of i64 data)."),
    "E0043": ("constant is not finite",
              "Folding a constant in binary64 gave infinity or NaN; the contract keeps every "
              "value finite at compile time."),
    "E0044": ("learner too large",
              "A learner holds at most 1,048,576 (2^20) values in all: its constants, data and "
              "state, 8 bytes each (8 MiB). The compiler folds and lays out every value at "
              "compile time; it counts them before it allocates a state and bounds a `.npy` "
              "file (at most that many bytes and a 64 KiB header) before reading it."),
    # -- learner structure --------------------------------------------------------------------
    "E0050": ("update is not per-coordinate",
              "Each coordinate's new value may depend only on that coordinate of the state, its "
              "mean gradient, constants, scalar state and the update's reduced scalars. Products "
              "of non-constants (logsumexp, outer, @, onehot), fixed indices such as w[0], and "
              "data are not allowed in `update`: a coordinate would read others, held elsewhere. "
              "dot, sum and max(v) are reduced scalars, computed before the statements: their "
              "operands may read gradients and the state the step starts from, not a value after "
              "its assignment, and no reduction inside another (docs/language.md)."),
    "E0051": ("coordinates of different shapes meet",
              "A per-coordinate update reads a coordinate value (a param, its gradient, or "
              "state updated from them) whose shape is not the target's. Coordinate k of the "
              "target must read coordinate k of each such value."),
    "E0052": ("not assignable",
              "Only `param` and `state` can be assigned in `update`; data, constants and `let` "
              "bindings cannot."),
    "E0053": ("state assigned twice",
              "A state is assigned at most once per update; later statements read its new value."),
    "E0054": ("grad of something that is not a param",
              "`grad(p)` is the mean gradient of the loss with respect to the param `p`."),
    "E0055": ("grad without a loss",
              "`grad` needs a `loss(i)` to differentiate; a learner without a loss updates its "
              "state by its own rule only."),
    "E0056": ("sample index outside the loss",
              "The sample index exists only inside `loss(i)` (and `predict(i)`)."),
    "E0057": ("loss is not a scalar",
              "The per-sample loss must be a scalar; reduce vectors with dot or sum."),
    "E0058": ("loss or predict without data",
              "A loss (or a predict) is evaluated per sample; the learner needs at least one "
              "`data` declaration, whose first dimension is the sample count."),
    "E0059": ("missing or repeated section",
              "A learner has exactly one `learner NAME` header and one `update` block, and at "
              "most one `loss` and at most one `predict`."),
    "E0061": ("bad minibatch declaration",
              "`batch N` declares minibatches of N samples, an integer from 1 to the sample "
              "count, in a learner with a loss; `order sequence` or `order shuffle(SEED)`, SEED "
              "an integer from 0 to 2^63 - 1, says the samples' order in each epoch. Each is "
              "declared at most once, and `order` needs `batch`."),
    "E0060": ("cannot load data file",
              "`load(\"file.npy\")` names a NumPy .npy file, relative to the source file. As "
              "`data`, it is read at run time by each owner (docs/data.md): little-endian "
              "float64 `<f8`, int64 `<i8` (values binary64 holds exactly) or uint8 `|u1`, C "
              "order, 1 or 2 dimensions, finite; the root of its chunk digests becomes part of "
              "the learner's identity. Data declared `i64` is read from `<i8` or `|u1` alone, "
              "each value within 2^53 in magnitude. As `const` it is compiled in: any integer or float type "
              "that binary64 holds exactly, at most 2 dimensions."),
    "E0063": ("bad contract declaration",
              "`contract ordered` (the default) or `contract exact_sum`, at most once. Under "
              "`ordered` every sum follows its declared order: each owner's left fold over its "
              "samples, then the combine tree, so the bits depend on the split. Under "
              "`exact_sum` every sum the split or the tree could reorder (the gradient and loss "
              "sums over samples and owners, the update's dot and sum) is computed exactly and "
              "rounded once, so every "
              "owner count, topology and strategy gives the single process's bits "
              "(docs/language.md)."),
    "E0062": ("predict is not a scalar or a vector",
              "`predict(i)` is the learner's output for sample i, checked as the loss is (it "
              "reads params, state, constants and the sample's data rows; it assigns nothing and "
              "takes no grad). Its block ends with the prediction: a scalar (a regression output) "
              "or a vector of class scores, whose first maximum is the predicted class (`alphac "
              "eval`). A matrix is refused."),
    # -- optimizers (alphac.types.optim) --------------------------------------------------------
    "E0070": ("unknown optimizer",
              "`optimizer NAME(...) for PARAMS` names an optimizer of the library (sgd, adam, "
              "adamw, rmsprop, adagrad: alphac/types/optimizers.alpha) or one the file defines "
              "(docs/language.md, Optimizers)."),
    "E0071": ("bad hyperparameter",
              "A hyperparameter the optimizer does not have, given twice, of the wrong form "
              "(`betas` is a pair, `(0.9, 0.999)`; a value of the update must be a scalar), a "
              "constant outside its domain (as torch.optim refuses it: a negative `lr`, a beta "
              "not in [0, 1), Nesterov without momentum), or a value of the update (`lr_t`) "
              "where the optimizer needs a constant: one that decides its form (`weight_decay`, "
              "`momentum`) or a state's initial value; `grad_scale` declared by a definition."),
    "E0072": ("optimizer applied to what is not a param",
              "`for` lists params (`for W1, b1`) or says `*` (every param no other optimizer "
              "names); each param has at most one optimizer, and the states an optimizer "
              "declares (`PARAM_STATE`, such as `W1_exp_avg`) must not be declared by the file."),
    "E0073": ("optimizer defined twice",
              "An optimizer definition's name is already the library's, or the file's."),
    "E0074": ("comparison out of place",
              "A comparison (`a < b`, `<=`, `>`, `>=`, `==`, `!=`) is not a number: it is only "
              "the condition of `where(a < b, x, y)`, which is x where the comparison holds and "
              "y elsewhere, elementwise. Its condition must be one comparison (nest `where`s for "
              "more), and comparisons do not chain (`a < b < c`)."),
    "E0075": ("step or epoch outside the update",
              "`step` (the run's step, counted from 0 over the whole run, resumes included) and "
              "`epoch` (step div the batches per epoch) are values only in `update`: the loss is "
              "the same function at every step. A declaration or `let` named `step` or `epoch` "
              "hides them."),
    # -- deployments (alphac.dist) ------------------------------------------------------------
    "E0100": ("unknown deployment",
              "`--deployment NAME` names a deployment the file does not declare."),
    "E0101": ("bad deployment item",
              "A deployment is a block of items, one per line: roles, topology, samples, combine, "
              "deliver, strategy, partition, target, memory (docs/distribution.md)."),
    "E0102": ("membership overlap",
              "Two index nodes of one role name cover the same index, as `owner[0..4], "
              "owner[3..8]` do at 3: a role would exist twice."),
    "E0103": ("membership gap",
              "The index nodes of a role name must cover 0..N without a hole, as `owner[0..3], "
              "owner[4..8]` do not (3 is missing)."),
    "E0104": ("unknown role",
              "The role, or its index, is not in the deployment's membership."),
    "E0105": ("samples not covered exactly once",
              "The sample split must give every sample 0..N-1 to exactly one owner: ranges may "
              "not overlap, leave a gap, or reach past the last sample. An owner may hold none."),
    "E0106": ("combine tree misses a contribution",
              "Every owner's contribution must appear in the combine tree; a missing one would "
              "silently drop its samples from the gradient."),
    "E0107": ("combine tree duplicates a contribution",
              "An owner appears twice in the combine tree; its samples would be counted twice."),
    "E0108": ("placement does not cover the state exactly once",
              "A partitioned state's coordinates must be split among the owners without overlap "
              "or gap: every coordinate has exactly one holder."),
    "E0109": ("fan-out over its bound",
              "A hierarchy's fan-out, and the number of peers of a star's center, are bounded "
              "(64): each role talks to at most fan-out + 1 peers. Use a hierarchy for more "
              "owners."),
    "E0110": ("memory demand over supply",
              "The bytes a role holds (its state, its samples' data, gradient sums and the "
              "values it receives) exceed the memory declared for it. Exactly the supply is "
              "accepted; one byte more is refused."),
    "E0111": ("target cannot run this role",
              "The target is not supported, or cannot run what this role must do: a GPU target "
              "(x86_64+sm_90, x86_64-v4+sm_86, ...) runs an owner's compute, so only owners may have one."),
    "E0112": ("bad strategy",
              "A strategy partitions or replicates the classes params, state and gradients; each "
              "class at most once. `replicated`, `zero1`, `zero2` and `zero3` are in the library "
              "(alphac/dist/strategies.alpha); a file may declare its own."),
    "E0113": ("bad topology",
              "A star is centered on a singleton role that holds no samples; a hierarchy needs "
              "owners and a fan-out of at least 2."),
    "E0114": ("missing or repeated deployment item",
              "A deployment needs `roles` and `topology`, and gives each item at most once."),
    "E0115": ("combine tree not realizable on the topology",
              "In a hierarchy each inner node combines its children in order; a written combine "
              "tree must be exactly that tree."),
    "E0116": ("delivery conflicts with the strategy",
              "Delivering the combined gradient to one owner needs a strategy that replicates "
              "everything: partitioned state lives on every owner."),
    "E0117": ("the protocol does not fit together",
              "The step projected to each role must match its peers (every send has its receive, "
              "in the same order) and let every role finish. This is checked for every plan; a "
              "failure is a defect in the plan's derivation or in a hand-written strategy."),
    "E0118": ("the mesh cannot combine this way",
              "A mesh reduce-scatters: every owner sends each other owner the part of its "
              "contribution that owner holds, and each owner combines its own coordinates in "
              "the combine tree's order. So the strategy must partition the gradients (`zero2`, "
              "`zero3`, or a strategy of the file's), and the contract must be the ordered one "
              "(under `exact_sum` use a star)."),
    "E0119": ("a scalar state reads a reduction only one owner can compute",
              "The update's dot, sum and max(v) of coordinate values are computed before its "
              "statements from the gradients and the state (docs/language.md). With `deliver` to "
              "one owner only that owner holds them, while every owner runs the scalar-state "
              "statements: so no scalar state may read them. Use `deliver all`."),
    # -- GPU owners (alphac.nvdrv, docs/nvdrv.md) -----------------------------------------------
    "E0120": ("GPU memory demand over the card's supply",
              "A GPU owner allocates its arena (code, constant banks, QMDs, push buffers, state, "
              "data, gradients) and its GPFIFO area in the card's memory, in 2 MiB units. That "
              "demand is checked against the memory the host description declares for the card: "
              "exactly the supply is accepted; one byte more is refused."),
    "E0121": ("no PTX assembler",
              "A GPU owner's kernels are assembled to SASS at build time by CUDA's ptxas (pinned "
              "and hashed in the manifest). None was found: install it, set ALPHAC_PTXAS, or pass "
              "--ptxas PATH. Nothing is written."),
    "E0122": ("GPU target without a host description",
              "A GPU owner is built for one card on one machine: its UUID, product name, memory "
              "and driver version are compiled in and checked at start-up. Give them with "
              "--gpu-host FILE or --gpu-uuid, --gpu-product, --gpu-memory and --driver "
              "(gpu/qualify.py writes the file from the machine); in a deployment, with the "
              "`gpu ROLE = \"FILE\"` item, which only GPU owners may have."),
    "E0123": ("bad GPU host description",
              "The host description needs `uuid GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, "
              "`product NAME`, `memory BYTES` (or N KiB/MiB/GiB), `driver VERSION`, and may give "
              "`minor N` (the card's /dev/nvidiaN); one `key value` per line, `#` comments."),
    "E0124": ("unsupported GPU target",
              "A GPU owner is an x86-64 executable for an Ampere (sm_86) or Hopper (sm_90) card, "
              "its host part (the shadow) at the baseline or a level: x86_64+sm_86, x86_64+sm_90, "
              "x86_64-v3+sm_90, x86_64-v4+sm_90 and so on (the build's refusal lists them all)."),
    "E0125": ("integer data used as a number",
              "Data declared `i64` (`data tok: i64[N, T] = load(\"tok.npy\")`) holds indices "
              "and labels: one of its elements is read only as the index of a declared array "
              "(`E[tok[i, t]]`, `w[tok[i]]`) or as onehot's label (`onehot(tok[i, 0], K)`), "
              "written so, directly. Any other use (arithmetic, a function, a slice, a whole "
              "row) is refused; to compute with its values, convert them (`f64(tok[i, 0])`, "
              "`f64(tok[i])`: the same binary64 values) or declare the data `f64`."),
    # -- warnings -----------------------------------------------------------------------------
    "W0001": ("param does not reach the loss",
              "The param never appears in the loss, so its gradient is +0.0 on every sample."),
    "W0002": ("state never updated",
              "The state keeps its initial value forever; a `const` may say what you mean."),
    "W0004": ("label outside onehot's range",
              "Data written in the source feeds `onehot(NAME[i], K)` (or indexes a K-row `E[NAME[i]]`) "
              "with a value that is not a "
              "whole number from 0 to K-1 (the first such row is named). Every engine refuses "
              "such labels when it reads the rows (`refused: data-label`, docs/refusals.md), as "
              "it does for labels loaded from a .npy file; PyTorch's cross-entropy refuses them "
              "too (\"Target out of bounds\")."),
    "W0003": ("param's gradient never used",
              "The param reaches the loss and is assigned in the update, but no update statement "
              "reads its gradient `grad(NAME)` (a `let` of it that nothing uses does not count): "
              "training never moves it by the loss. Use the gradient, or declare it `const`."),
}


def explain(code: str) -> str | None:
    entry = CODES.get(code.upper())
    if entry is None:
        return None
    title, text = entry
    return f"{code.upper()}: {title}\n\n{text}\n"
