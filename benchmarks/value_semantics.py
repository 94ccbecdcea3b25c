"""Share of generated values that pass the field-semantic check, on the fixture corpus and the OpenAPI corpus.

Builds every fixture document and ``--files`` corpus documents (shuffled by ``--seed``) with the programmatic
builder, then judges with :mod:`envfactory_assets.quality.value_semantics`:

- the seeded values of each ``valid`` initial state (identifiers left out), and seeded dates after the clock;
- the values :func:`~envfactory_assets.synth.trajectories.execution.resolve_arguments` invents for the user in every
  create and update tool (all inputs stated by the user).

Prints pass/fail/unknown counts, the share passing (pass / judged), the most frequent failures, and
``--show`` seeded rows and create-call argument sets chosen at random. Usage::

    .venv/bin/python -m benchmarks.value_semantics --files 3000 --show 10
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from pathlib import Path

from envfactory_assets.envgen.builder import build_environment
from envfactory_assets.envgen.values import ValueFactory
from envfactory_assets.quality.value_semantics import (
    Tally,
    check_value,
    environment_values,
    share_passing,
    timestamps_after_clock,
)
from envfactory_assets.settings import corpus_dir
from envfactory_assets.sources.scan import (
    SourceResource,
    corpus_files,
    inspect_file,
    load_document,
)
from envfactory_assets.synth.sampling.sampler import USER, Chain
from envfactory_assets.synth.trajectories.execution import ToolIndex, resolve_arguments

FIXTURES = Path(__file__).resolve().parents[1] / "envfactory_assets_tests" / "fixtures" / "openapi"


def build_all(root: Path, files: list[Path]) -> list[dict]:
    envs = []
    for path in files:
        resource = inspect_file(path, root)
        if not isinstance(resource, SourceResource):
            continue
        try:
            envs.append(build_environment(resource.as_row(), load_document(path.read_bytes(), path.suffix.lower())))
        except Exception:  # a document the builder refuses is not part of the measure
            continue
    return envs


def user_arguments(envs: list[dict], rng: random.Random) -> tuple[Tally, Counter, list]:
    tally, failures, shown = Tally(), Counter(), []
    for env in envs:
        env_id = env["env_id"]
        index = ToolIndex({env_id: env})
        saved = {env_id: next(s["state"] for s in env["initial_states"] if s["name"] == "valid")}
        values = ValueFactory(11, now=saved[env_id]["meta"]["now"])
        for tool in env["tools"]:
            if tool["kind"] not in ("create", "update"):
                continue
            node = f"{env_id}.{tool['name']}"
            props = tool["input_schema"]["properties"]
            chain = Chain(
                tools=(node,), servers=(env_id,), seed=0, sampler="topology", producers={node: {p: USER for p in props}}
            )
            try:
                args, prov = resolve_arguments(tool, node, chain, None, [], saved, index, values, rng)
            except LookupError:
                continue
            stated = {k: v for k, v in args.items() if prov[k]["source"] == "user"}
            for name, value in stated.items():
                judgement = check_value(name, props[name], value, props[name].get("description", ""))
                tally.add(judgement.verdict)
                if judgement.verdict == "fail":
                    failures[f"{name} ({judgement.rule})"] += 1
            if tool["kind"] == "create" and stated:
                shown.append((tool["name"], stated))
    return tally, failures, shown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=corpus_dir())
    parser.add_argument("--files", type=int, default=300, help="corpus documents to try (shuffled)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--show", type=int, default=10)
    args = parser.parse_args()
    files = corpus_files(args.corpus)
    random.Random(args.seed).shuffle(files)
    groups = {
        "fixtures": build_all(FIXTURES, corpus_files(FIXTURES)),
        "corpus": build_all(args.corpus, files[: args.files]),
    }
    rng = random.Random(args.seed)
    for group, envs in groups.items():
        tally, failures = share_passing(it for env in envs for it in environment_values(env))
        late = sum(timestamps_after_clock(env)[0] for env in envs)
        total = sum(timestamps_after_clock(env)[1] for env in envs)
        print(
            f"{group}: {len(envs)} environments; seeded values {tally.as_dict()}; "
            f"seeded dates after the clock {late}/{total}"
        )
        print("  most frequent failures:", Counter(f"{n} ({r})" for n, _v, r, _x in failures).most_common(8))
        synth, synth_failures, shown = user_arguments(envs, rng)
        print(f"  synthesized create/update values {synth.as_dict()}")
        print("  most frequent failures:", synth_failures.most_common(8))
        if group == "corpus":
            for env in rng.sample(envs, min(args.show, len(envs))):
                state = next(s["state"] for s in env["initial_states"] if s["name"] == "valid")
                tables = [t for t, rows in state["tables"].items() if rows]
                if tables:
                    table = rng.choice(tables)
                    print(
                        "  row",
                        env["env_id"],
                        table,
                        json.dumps(rng.choice(state["tables"][table]), ensure_ascii=False)[:400],
                    )
            for name, stated in rng.sample(shown, min(args.show, len(shown))):
                print("  call", name, json.dumps(stated, ensure_ascii=False)[:400])


if __name__ == "__main__":
    main()
