"""The front end's entry points: Alpha source -> `ast.Module`, with coded diagnostics.

`parse` reads one learner file (alphac.parse.lexer, then alphac.parse.parser with the
deployment and strategy declarations of alphac.parse.deploy and the optimizers of
alphac.parse.optim); `parse_library` reads declarations without a `learner` header (the
strategy and optimizer libraries). Never raises on any input.
"""
from __future__ import annotations

from alphac.diag import Sink, Source
from alphac.parse import ast
from alphac.parse.deploy import parse_deployment, parse_strategy
from alphac.parse.lexer import lex
from alphac.parse.optim import parse_optimizer
from alphac.parse.parser import DECL_PARSERS, Parser, _Bail

DECLS = {**DECL_PARSERS, "deployment": parse_deployment, "strategy": parse_strategy,
         "optimizer": parse_optimizer}


def parse(source: Source, sink: Sink) -> ast.Module:
    """Lex and parse one Alpha file; diagnostics go to `sink`."""
    return Parser(lex(source, sink), sink, DECLS).parse_module()


def parse_library(source: Source, sink: Sink) -> list[object]:
    """Declarations without a `learner` header: the strategy and optimizer libraries."""
    p = Parser(lex(source, sink), sink, DECLS)
    decls = []
    while True:
        p.skip_newlines()
        if p.at("eof"):
            return decls
        try:
            decls.append(p.parse_decl())
        except _Bail:
            p.recover_to_decl()
