"""The full grid of a tune file, for comparing a tune's answer and cost with it: every allowed configuration of the
tune's space as one arm of one experiment (engines up together, fixed repeats), written for one operating point.
Run it with ``leverbench run`` and read its total multipliers against the baseline (docs/tune.md does so for
examples/tune.toml).

    .venv/bin/python benchmarks/tune_grid.py examples/tune.toml --point 2 --repeats 4 --out runs/grid2.toml
    .venv/bin/leverbench run runs/grid2.toml --out runs/grid2

The grid file sits beside the tune file's cases' documents only if written into the same folder; elsewhere its
documents are copied next to it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import tomllib
from pathlib import Path


def grid_toml(tune_file: Path, point: int, repeats: int) -> str:
    """The experiment file of the grid (module docstring)."""
    text = tune_file.read_text()
    data = tomllib.loads(text)
    tune = data.pop("tune")
    engine = data["arms"][0]["engine"]
    names = list(tune["knobs"])
    baseline = {**{k: v[0] for k, v in tune["knobs"].items()}, **engine.get("values", {}), **tune.get("baseline", {})}
    base_name = " ".join(f"{k}={baseline[k]}" for k in names)
    exp = {**data.get("experiment", {}), "name": f"{data['experiment']['name']}-grid-{point}", "repeats": repeats,
           "in_flight": point, "engines": "together", "baseline": base_name}
    lines = ["[experiment]", *(f"{k} = {json.dumps(v)}" for k, v in exp.items())]
    for combo in itertools.product(*tune["knobs"].values()):
        config = dict(zip(names, combo))
        if any(all(config[k] == v for k, v in ex.items()) for ex in tune.get("exclude", [])):
            continue
        name = " ".join(f"{k}={v}" for k, v in config.items())
        values = {**engine.get("values", {}), **config}
        rest = ", ".join(f"{k} = {json.dumps(v)}" for k, v in engine.items() if k != "values")
        vals = ", ".join(f"{k} = {json.dumps(v)}" for k, v in values.items())
        lines += ["", "[[arms]]", f"name = {json.dumps(name)}",
                  f"role = {json.dumps('baseline' if name == base_name else 'treatment')}",
                  f"engine = {{ {rest}, values = {{ {vals} }} }}"]
    return "\n".join(lines) + "\n\n" + text[text.index("[[cases]]"):]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tune_file", type=Path)
    ap.add_argument("--point", type=int, default=1, help="requests in flight ([experiment] in_flight)")
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--out", type=Path, required=True, help="the grid's experiment file to write")
    a = ap.parse_args()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(grid_toml(a.tune_file, a.point, a.repeats))
    docs = a.tune_file.parent / "docs"
    if docs.is_dir() and a.out.parent.resolve() != a.tune_file.parent.resolve():
        shutil.copytree(docs, a.out.parent / "docs", dirs_exist_ok=True)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
