"""What `nudge plan` prints: an estimate as text with every assumption named, or as one JSON
object whose `wall_seconds` (and, with a campaign, `gpu_hours`) carry the estimate."""

from __future__ import annotations

from dataclasses import asdict

from .campaign import CampaignEstimate
from .run_estimate import RunEstimate, duration


def as_json(run: RunEstimate, paper: CampaignEstimate | None = None) -> dict:
    """The run's estimate; with `paper`, the campaign's under `campaign`, and its totals at the
    top level (`wall_seconds`, `gpu_hours`), the run's then under `run`."""
    out = run.to_json()
    if paper is None:
        return out
    campaign = paper.campaign
    return {
        "run": out,
        "campaign": {
            "file": campaign.where,
            "device": paper.device,
            "problems": campaign.problems,
            "tasks": list(campaign.tasks),
            "max_new_tokens": [campaign.max_new_tokens, campaign.max_new_tokens_arm],
            "lengths": asdict(campaign.lengths),
            "formats": {k: asdict(v) for k, v in campaign.formats.items()},
            "models": [asdict(m) for m in campaign.models],
            "runs": [asdict(r) for r in paper.runs],
        },
        "wall_seconds": paper.wall_seconds,
        "gpu_hours": paper.gpu_hours,
    }


def as_text(run: RunEstimate, paper: CampaignEstimate | None = None) -> str:
    rates, lengths = run.rates, run.lengths
    steps = ", ".join(
        f"{t * 1e3:.1f} ms at {r} row{'s' * (r > 1)} ({rates.efficiency(r):.1f}x the floor)"
        for r, t in rates.decode
    )
    workers = (
        f"{run.workers} workers of 1 thread" if run.workers > 1 else f"{rates.threads} threads"
    )
    lines = [
        f"nudge plan: {run.model} on {run.task}, {run.n} problems, {run.device} {run.dtype}, "
        f"{run.schedule} schedule, {workers}",
        f"  measured here in {rates.measure_seconds:.0f} s: prefill "
        f"{rates.prefill_tokens_per_s:,.0f} tokens/s; decode step {steps}; copy bandwidth "
        f"{rates.copy_bytes_per_s / 1e9:.1f} GB/s",
        f"  work: {run.sequences:,.0f} sequences, {run.prompt_tokens:,} prompt tokens, "
        f"{run.generated_tokens:,.0f} new tokens expected",
        f"  lengths assumed: bases generate {lengths.base_share:.0%} of their budget, arms "
        f"{lengths.arm_share:.0%}, {lengths.closes:.0%} of B and oracle_B close their thinking "
        f"(the cut at {lengths.cut_share:.0%} of a base), {lengths.base_at_budget:.0%} of bases and "
        f"{lengths.arm_at_budget:.0%} of arms run to their budget; from {lengths.source}",
        f"  estimate: {duration(run.wall_seconds)} wall (start {run.startup_seconds:.1f} s, "
        f"then {duration(run.compute_seconds)} of engine time on the slowest worker)"
        + (f", {run.gpu_hours:.2f} GPU-hours" if run.gpu_hours is not None else ""),
    ]
    lines.append(startup_text(run))
    lines += [f"  not estimated: {what}" for what in run.left_out]
    if paper is not None:
        lines += [""] + campaign_text(paper).splitlines()
    return "\n".join(lines)


def startup_text(run) -> str:
    """Where the start goes: measured here, the CUDA graphs' compile and capture per bucket."""
    text = f"  start-up measured here: {run.startup_seconds:.1f} s (imports, model, needle, engine"
    if not run.captures:
        return text + f"; no CUDA graphs to compile and capture on {run.device})"
    per = ", ".join(f"bucket {rows} {seconds:.1f} s" for rows, seconds in run.captures)
    total = sum(seconds for _, seconds in run.captures)
    return text + f"; of it the graphs' compile and capture, {total:.1f} s: {per})"


def campaign_text(paper: CampaignEstimate) -> str:
    c = paper.campaign
    lines = [
        f"The campaign of {c.where} on this device ({paper.device}):",
        f"  {c.problems:,} problems per task ({', '.join(c.tasks)}); bases of up to "
        f"{c.max_new_tokens:,} new tokens, arms of up to {c.max_new_tokens_arm:,}; lengths from "
        f"{c.lengths.source}; {c.lengths.closes:.0%} of bases close, {c.lengths.base_at_budget:.0%} of "
        "sequences run to their budget",
        "  each model's step: the measured model's efficiency against its floor, on that model's "
        "floor (its weights in its format, its KV) at this device's copy bandwidth; prefill "
        "scaled by parameters; model loading, compile and graph capture not counted (the "
        "measured run's start-up above is the only figure for them)",
        "",
        "| model | format | task | rows a step | new tokens | hours |",
        "|---|---|---|---|---|---|",
    ]
    formats = {m.name: m.format for m in c.models}
    for r in paper.runs:
        rows = "uncapped" if r.rows is None else str(r.rows)
        lines.append(
            f"| {r.model} | {formats[r.model]} | {r.task} | {rows} | "
            f"{r.generated_tokens / 1e6:.1f}M | {r.wall_seconds / 3600:,.1f} |"
        )
    lines += ["", f"  total: {paper.gpu_hours:,.1f} hours of this device", "  assumptions:"]
    for name, f in c.formats.items():
        lines.append(
            f"    format {name}: {f.bytes_per_param:g} bytes a parameter, slowdown {f.slowdown:g}"
        )
    for m in c.models:
        window = f", window {m.window} at {m.window_bytes_per_token:,} B" if m.window else ""
        lines.append(
            f"    {m.name}: {m.params_b:g}B parameters (head {m.head_params_b:g}B), KV "
            f"{m.kv_bytes_per_token:,} B a token{window}; {m.source}"
        )
    return "\n".join(lines)
