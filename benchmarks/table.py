"""Renders benchmarks/results/*.json as the Markdown table the README quotes.

    python benchmarks/table.py
"""
from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def _load(name: str) -> dict | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def rows() -> list[tuple[str, str, str, str]]:
    out = []
    s = _load("sampler")
    if s:
        sp, chi = s["speed"], s["uniformity_chi2"]
        built = sp["builtin_cpu"]["median_ms"]
        if "torch_sparse_native" in sp:
            ratio = sp["builtin_over_native"]
            out.append(("sampler.py", "built-in vs torch-sparse 0.6.18, ms/batch ([25, 10], "
                        "batch 1024, 23.5M edges)",
                        f"{built:.1f} vs {sp['torch_sparse_native']['median_ms']:.1f} "
                        f"= {ratio:.2f}x (PyG wrapper {sp['pyg_neighbor_sampler']['median_ms']:.1f})",
                        f"<= 0.2x: {_verdict(ratio <= 0.2)}"))
        else:
            out.append(("sampler.py", "built-in, ms/batch", f"{built:.1f}", "no torch-sparse"))
        native = chi.get("torch_sparse_native")
        out.append(("sampler.py", "chi-square, 5 of 40 neighbours x 20,000 (39 dof)",
                    f"built-in {chi['builtin']:.1f}" +
                    (f", torch-sparse {native:.1f}" if native is not None else ""),
                    f"< {chi['critical_p001']} (p = 0.001): "
                    f"{_verdict(chi['builtin'] < chi['critical_p001'])}"))
        if "cpu_over_cuda" in sp:
            out.append(("sampler.py", "built-in CUDA vs CPU", f"{sp['cpu_over_cuda']:.1f}x",
                        f">= 10x: {_verdict(sp['cpu_over_cuda'] >= 10)}"))
    t = _load("trial_overhead")
    if t:
        m = t["median"]
        out.append(("trial_overhead.py", "spawn and load, s (imports / dataset mmap)",
                    f"{m['spawn_and_load']:.2f} ({m['imports']:.2f} / {m['dataset_load']:.3f})",
                    f"< 2 s: {_verdict(t['meets']['spawn_and_load'])}"))
        out.append(("trial_overhead.py", "outside the window, share of a trial's wall time",
                    f"{100 * m['outside_window_fraction']:.1f}% of {m['wall_s']:.0f} s",
                    f"<= 30%: {_verdict(t['meets']['outside_window'])}"))
    n = _load("noise")
    if n:
        out.append(("noise.py", f"throughput CV over {len(n['seed_nodes_per_s'])} trials",
                    f"{100 * n['throughput_cv']:.2f}% (median "
                    f"{n['median_seed_nodes_per_s']:.0f} seed nodes/s)",
                    f"<= 5%: {_verdict(n['meets'])}"))
    e = _load("search_efficiency")
    if e:
        fmt = ", ".join(f"{name} {r['median_best_ratio']:.2f} / {r['median_hypervolume_ratio']:.2f}"
                        for name, r in e["samplers"].items())
        out.append(("search_efficiency.py", f"best throughput / grid best, hypervolume / grid "
                    f"({e['trials_per_run']} trials, {e['seeds']} seeds, grid of "
                    f"{e['grid_size']})", fmt,
                    f"default ({e['default_sampler']}) >= {e['target_best_ratio']}: "
                    f"{_verdict(e['meets']['default_reaches_target'])}; beats random: "
                    f"{_verdict(e['meets']['default_beats_random'])}"))
    d = _load("distributed")
    if d:
        fmt = "; ".join(f"{r['workers']} worker{'s' if r['workers'] > 1 else ''}: "
                        f"{r['trials_per_min']:.1f}/min, {r['median_storage_overhead_ms']:.0f} ms"
                        for r in d["runs"])
        out.append(("distributed.py", f"PostgreSQL, {d['budget_trials']} cheap trials, "
                    "measurement lock on: trials per minute, storage overhead per trial", fmt,
                    "reported (no target)"))
    return out


def main() -> None:
    print("| script | figure | measured (median) | target |")
    print("|---|---|---|---|")
    for row in rows():
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
