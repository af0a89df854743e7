"""``python -m sync.sim``: run one scenario, or sweep seeds (``--seeds A-B``); ``--sweep``
runs every scenario of ``sync.sim.scenario.SWEEP`` over the seeds (``make sim``).

A failing seed prints the exact command that replays it and the sweep exits 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence

from sync.sds import SdsConfig
from sync.sim.network import NetworkConfig
from sync.sim.runner import SimFailure, run
from sync.sim.scenario import SWEEP, Scenario

__all__ = ["main", "parse"]


def _sds_overrides(items: Sequence[str]) -> SdsConfig:
    base = SdsConfig()
    changes: dict[str, object] = {}
    types = {f.name: type(getattr(base, f.name)) for f in dataclasses.fields(SdsConfig)}
    for item in items:
        name, _, value = item.partition("=")
        if name not in types:
            raise SystemExit(f"unknown SdsConfig field {name!r}")
        kind = types[name]
        changes[name] = (value.lower() == "true") if kind is bool else kind(value)
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def parse(argv: Sequence[str] | None = None) -> tuple[Scenario, range | None, bool]:
    scenario, seeds, as_json, _ = parse_all(argv)
    return scenario, seeds, as_json


def parse_all(argv: Sequence[str] | None = None
              ) -> tuple[Scenario, range | None, bool, bool]:
    p = argparse.ArgumentParser(prog="python -m sync.sim", description=__doc__)
    p.add_argument("--members", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seeds", help="sweep seeds A-B (inclusive) instead of one --seed")
    p.add_argument("--rate", type=float, default=20.0)
    p.add_argument("--duration", type=float, default=30.0)
    p.add_argument("--settle", type=float, default=900.0)
    p.add_argument("--loss", type=float, default=0.0, help="delivery loss per member")
    p.add_argument("--link-loss", type=float, default=0.0)
    p.add_argument("--degree", type=int, default=6)
    p.add_argument("--bandwidth", type=float, default=0.0)
    p.add_argument("--crash-rate", type=float, default=0.0)
    p.add_argument("--leave-rate", type=float, default=0.0)
    p.add_argument("--join-rate", type=float, default=0.0)
    p.add_argument("--skew", type=float, default=0.0)
    p.add_argument("--partition", action="append", default=[], help="START,END,FRACTION")
    p.add_argument("--unsigned", action="store_true")
    p.add_argument("--fetch", action="store_true", help="model the node's fetch-by-id")
    p.add_argument("--recon", action="store_true", help="model Recon and its transfer")
    p.add_argument("--recon-interval", type=float, default=10.0)
    p.add_argument("--hostile", action="append", default=[],
                   help="a hostile member: clock, amplify, acks, withhold or junk (repeatable)")
    p.add_argument("--unshared", action="store_true",
                   help="every member decodes and verifies on its own (slower)")
    p.add_argument("--allow-lost", action="store_true",
                   help="a member may lack messages it declared lost (Recon's job)")
    p.add_argument("--sds", action="append", default=[], help="SdsConfig override NAME=VALUE")
    p.add_argument("--json", action="store_true", help="print each run's figures as JSON")
    p.add_argument("--sweep", action="store_true", help="every scenario of SWEEP")
    a = p.parse_args(argv)
    partitions = tuple(tuple(float(x) for x in spec.split(",")) for spec in a.partition)
    scenario = Scenario(
        members=a.members, seed=a.seed, rate=a.rate, duration=a.duration, settle=a.settle,
        network=NetworkConfig(degree=a.degree, link_loss=a.link_loss, delivery_loss=a.loss,
                              bandwidth=a.bandwidth),
        crash_rate=a.crash_rate, leave_rate=a.leave_rate, join_rate=a.join_rate,
        skew=a.skew, partitions=partitions,  # type: ignore[arg-type]
        sds=_sds_overrides(a.sds), signed=not a.unsigned, allow_lost=a.allow_lost,
        fetch=a.fetch, recon=a.recon, recon_interval=a.recon_interval,
        hostile=tuple(a.hostile), shared=not a.unshared)
    seeds = None
    if a.seeds:
        lo, _, hi = a.seeds.partition("-")
        seeds = range(int(lo), int(hi or lo) + 1)
    return scenario, seeds, a.json, a.sweep


def main(argv: Sequence[str] | None = None) -> int:
    scenario, seeds, as_json, sweep = parse_all(argv)
    failed = 0
    named = SWEEP if sweep else {"run": scenario}
    runs = [(name, sc, seed) for name, sc in named.items()
            for seed in (seeds if seeds is not None else [scenario.seed])]
    for name, base, seed in runs:
        sc = dataclasses.replace(base, seed=seed)
        try:
            stats = run(sc)
        except SimFailure as exc:
            failed += 1
            print(f"{name} seed {seed}: FAILED\n{exc}", flush=True)
            continue
        summary = stats.summary()
        if as_json:
            print(json.dumps({"scenario": name, "seed": seed, **summary}), flush=True)
        else:
            print(f"{name} seed {seed}: ok, {summary['published']} messages, "
                  f"{stats.members} members, {summary['sim_seconds']} s simulated", flush=True)
    print(f"{failed} seed(s) failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
