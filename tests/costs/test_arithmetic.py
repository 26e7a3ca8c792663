"""The estimator's arithmetic (costs/estimate/rates.py, schedule.py, campaign.py) against cases worked
by hand in each test's comments: step interpolation, the floor and its efficiency, the two
schedules' seconds, the campaign's scaling, rows and file errors."""

from __future__ import annotations

import pytest

from nudgeability.costs.estimate.campaign import (
    CampaignError,
    CampaignModel,
    Format,
    load_campaign,
    model_rows,
    scaled_rates,
)
from nudgeability.costs.estimate.rates import Rates, row_counts, staggered_budgets
from nudgeability.costs.estimate.schedule import parts, stream_timeline, units_timeline
from nudgeability.costs.estimate.workload import BaseWork, Lengths, Workload


def rates(decode=((1, 0.1),), prefill=100.0, weight=0, kv=0, context=0.0, bw=1e10) -> Rates:
    return Rates("cpu", 1, prefill, tuple(decode), context, kv, weight, bw)


def test_step_interpolates_between_measured_rows_and_extends_the_last_slope():
    r = rates(decode=((1, 0.1), (16, 0.25), (64, 0.7)))
    assert r.measured_step(1) == pytest.approx(0.1)
    assert r.measured_step(0.5) == pytest.approx(0.1)  # below the first: its time
    assert r.measured_step(8) == pytest.approx(0.1 + 0.15 * 7 / 15)
    assert r.measured_step(40) == pytest.approx(0.25 + 0.45 * 24 / 48)
    assert r.measured_step(128) == pytest.approx(0.7 + 0.45 / 48 * 64)


def test_floor_efficiency_and_the_extra_context():
    # weights 1e9 B, KV 1000 B a slot; measured with 100 slots of its own a row, copy 1e10 B/s
    r = rates(decode=((10, 0.2002),), weight=10**9, kv=1000, context=100.0)
    floor = (1e9 + 100 * 10 * 1000) / 1e10  # 0.1001 s
    assert r.floor_seconds(10) == pytest.approx(floor)
    assert r.efficiency(10) == pytest.approx(2.0)
    # 10 rows reading 6,000 distinct slots, 5,000 more than measured: 5e6 B at 1e10 B/s, at the
    # step's efficiency (2)
    assert r.step_seconds(10, 6000) == pytest.approx(0.2002 + 2 * 5e6 / 1e10)
    assert r.step_seconds(10, 500) == pytest.approx(0.2002)  # fewer slots cost nothing less


def test_a_shared_prompt_is_read_once_for_the_measured_rows():
    r = Rates("cpu", 1, 1.0, ((4, 0.1),), 10.0, 1000, 10**9, 1e10, shared_context=300.0)
    assert r.measured_slots(4) == pytest.approx(300 + 4 * 10)
    assert r.floor_seconds(4) == pytest.approx((1e9 + 340 * 1000) / 1e10)


def test_sliding_window_layers_read_at_most_their_window():
    r = Rates("cpu", 1, 1.0, ((1, 0.1),), 100.0, 0, 0, 1e10, window=300, window_slot_bytes=1000)
    # 2 rows of 1,000 slots each: the window layers read 300 a row, against 100 measured
    extra = (300 - 100) * 2 * 1000 / 1e10
    assert r.kv_seconds(2, 2000) == pytest.approx(extra * r.efficiency(2))


def test_row_counts_reach_the_peak_within_the_cap():
    assert row_counts(12, None) == [1, 4, 16]
    assert row_counts(1, None) == [1]
    assert row_counts(300, 100) == [1, 4, 16, 64, 100]
    assert row_counts(700, None) == [1, 4, 16, 64, 256, 512]


def one_chunk(*bases: BaseWork, budget=100, arm_budget=10) -> Workload:
    return Workload(((tuple(bases),),), budget, arm_budget)


HALF = Lengths(base_share=0.5, arm_share=1.0, closes=1.0, cut_share=0.9, source="test")


def test_units_of_one_base_phase():
    # two problems of one NT each: prompts of 10 (no shared start) prefill at 100 tokens/s
    # (0.2 s); 50 tokens each decode together: 50 steps of 0.1 s
    work = Workload((((BaseWork("NT", 10, 0),), (BaseWork("NT", 10, 0),)),), 100, 10)
    line = units_timeline(work, HALF, rates())
    assert line.seconds == pytest.approx(0.2 + 5.0)
    assert line.generated_tokens == pytest.approx(100)
    assert line.steps == pytest.approx(50)


def test_units_fork_arms_with_their_stem_computed_again():
    # B: prompt 10 (0.1 s), 50 steps (5 s); its 2 arms: splices of 5 each and the stem (prompt
    # + 90% of 50 = 55 tokens) computed once: 65 tokens (0.65 s), then 10 steps (1 s)
    work = one_chunk(BaseWork("B", 10, 0, (5, 5)))
    line = units_timeline(work, HALF, rates())
    assert line.seconds == pytest.approx(0.1 + 5.0 + 0.65 + 1.0)
    assert line.prefill_tokens == pytest.approx(10 + 65)


def test_the_stream_runs_bases_together_and_copies_the_stem():
    # NT and B together: 20 prompt tokens (0.2 s), 50 steps (5 s); B's arms fork with the stem
    # copied: 10 splice tokens (0.1 s), 10 steps (1 s)
    work = one_chunk(BaseWork("NT", 10, 0), BaseWork("B", 10, 0, (5, 5)))
    line = stream_timeline(work, HALF, rates())
    assert line.seconds == pytest.approx(0.2 + 5.0 + 0.1 + 1.0)
    # without the copy (a pool with a budget): the stem's 55 tokens once more
    line = stream_timeline(work, HALF, rates(), reuse_stems=False)
    assert line.seconds == pytest.approx(0.2 + 5.0 + 0.65 + 1.0)


def test_the_stream_window_holds_the_next_chunk_back():
    # two chunks of one base; a window of one chunk: the second starts when the first ends
    work = Workload((((BaseWork("NT", 10, 0),),), ((BaseWork("NT", 10, 0),),)), 100, 10)
    serial = stream_timeline(work, HALF, rates(), window_chunks=1)
    assert serial.seconds == pytest.approx(2 * (0.1 + 5.0))
    together = stream_timeline(work, HALF, rates(), window_chunks=2)
    assert together.seconds == pytest.approx(0.2 + 5.0)


def test_a_shared_start_is_computed_once_per_base():
    # prompts of 10 whose first 6 are the base's shared start: 6 + 4 + 4 tokens
    work = Workload((((BaseWork("NT", 10, 6),), (BaseWork("NT", 10, 6),)),), 100, 10)
    assert units_timeline(work, HALF, rates()).prefill_tokens == pytest.approx(14)


def test_rows_over_the_cap_wait_their_turn():
    # four sequences of 10 tokens, 2 rows a step, a step of r rows taking 0.1 r s:
    # 20 steps of 2 rows, 0.2 s each
    work = Workload((tuple((BaseWork("NT", 1, 0),) for _ in range(4)),), 10, 10)
    line = units_timeline(
        work,
        Lengths(1.0, 1.0, source="t"),
        rates(decode=((1, 0.1), (2, 0.2)), prefill=1e12),
        max_rows=2,
    )
    assert line.seconds == pytest.approx(4.0)
    assert line.peak_rows == 2


def test_a_campaign_model_scales_by_its_floor_and_its_parameters():
    measured = rates(decode=((1, 0.2),), prefill=1000.0, weight=10**9)  # floor 0.1 s: 2x
    model = CampaignModel("m", "fp8", params_b=8.0, head_params_b=1.0, kv_bytes_per_token=0)
    fmt = Format(bytes_per_param=1.0)
    assert model.weight_bytes(fmt) == pytest.approx(7e9 + 2e9)  # body at 1 B, head in bf16
    scaled = scaled_rates(measured, 1e8, model, fmt)
    assert scaled.measured_step(1) == pytest.approx(2 * 9e9 / 1e10)
    assert scaled.prefill_tokens_per_s == pytest.approx(1000 * 1e8 / 7e9)
    slow = scaled_rates(measured, 1e8, model, Format(1.0, slowdown=1.5))
    assert slow.measured_step(1) == pytest.approx(1.5 * 2 * 9e9 / 1e10)


def test_a_campaign_model_gets_the_rows_its_kv_pool_holds():
    campaign = load_campaign()
    model = CampaignModel("m", "fp8", params_b=8.0, head_params_b=1.0, kv_bytes_per_token=147456)
    fmt = campaign.formats["fp8"]
    # 80e9 B x 0.9 less 9e9 of weights: 63e9 B of KV, 427,246 slots; a row takes 1,024 + 4,096
    # + 2,048 slots (splice/run/device_batching.py): 59 rows
    assert model_rows(campaign, model, Format(1.0), 80 * 10**9) == 59
    assert model_rows(campaign, model, fmt, None) is None
    with pytest.raises(CampaignError, match="does not fit"):
        model_rows(campaign, model, Format(1.0), 10**9)


def test_the_paper_campaign_lists_nine_models_on_two_tasks():
    campaign = load_campaign()
    assert len(campaign.models) == 9 and campaign.tasks == ("strategyqa", "musique")
    assert campaign.lengths.base_share * campaign.max_new_tokens == pytest.approx(1500)


@pytest.mark.parametrize(
    "text,field",
    [
        ("problems = 1\n", "max_new_tokens"),
        ('problems = "x"\n', "problems"),
        ("problems = 1\n[[models]]\nname = 'a'\n", "format"),
    ],
)
def test_a_malformed_campaign_file_is_named_with_its_field(tmp_path, text, field):
    path = tmp_path / "c.toml"
    body = text + ("" if "models" in text else "[formats.bf16]\nbytes_per_param = 2\n")
    body += (
        ""
        if "[[models]]" in text
        else (
            "[[models]]\nname='a'\nformat='bf16'\nparams_b=1\nhead_params_b=0.1\nkv_bytes_per_token=1\n"
        )
    )
    path.write_text(body)
    with pytest.raises(CampaignError, match=rf"{path}.*field {field}"):
        load_campaign(path)


def test_a_step_pays_for_the_kv_its_rows_read():
    # one NT, prompt 10 (0.1 s of prefill), 2 tokens; a step reads its 10 slots and the 0 to 2
    # it wrote (11 on average over the two steps): 11 x 1,000 B at 1e4 B/s = 1.1 s beside the
    # measured 0.1 s (no weights: efficiency 1)
    work = Workload((((BaseWork("NT", 10, 0),),),), 4, 4)
    line = units_timeline(work, HALF, rates(kv=1000, bw=1e4))
    assert line.seconds == pytest.approx(0.1 + 2 * (0.1 + 1.1))


def test_staggered_budgets_give_a_segment_of_steps_at_each_row_count():
    budgets = staggered_budgets([1, 4, 16], segment=8)
    assert budgets == [25] + [17] * 3 + [9] * 12
    # decode step i (the first token came with the prefill) runs the arms with budget - 1 >= i
    rows = [sum(1 for b in budgets if b - 1 >= i) for i in range(1, 25)]
    assert rows == [16] * 8 + [4] * 8 + [1] * 8


def test_lengths_in_two_parts_keep_the_mean():
    assert parts(0.5, 0.0, 100) == [(1.0, 50.0)]
    assert parts(0.5, 0.2, 100) == [(0.8, pytest.approx(37.5)), (0.2, 100.0)]  # 30 + 20 = 50
    assert parts(0.1, 0.2, 100) == [(0.9, 0.0), (0.1, 100.0)]  # at most the mean's share


def test_a_unit_lasts_as_long_as_its_longest_sequence():
    # two NT of mean 50 tokens of 100, half of them at the budget: the unit runs 100 steps (the
    # long halves, one row in all) after 20 prompt tokens, where equal lengths would run 50
    work = Workload((((BaseWork("NT", 10, 0),), (BaseWork("NT", 10, 0),)),), 100, 10)
    tail = Lengths(base_share=0.5, arm_share=1.0, base_at_budget=0.5, source="test")
    assert units_timeline(work, tail, rates()).seconds == pytest.approx(0.2 + 100 * 0.1)


def test_no_base_closing_forks_no_arm():
    work = one_chunk(BaseWork("B", 10, 0, (5, 5)))
    shut = Lengths(base_share=0.5, arm_share=1.0, closes=0.0, source="test")
    assert units_timeline(work, shut, rates()).seconds == pytest.approx(0.1 + 5.0)
    assert stream_timeline(work, shut, rates()).seconds == pytest.approx(0.1 + 5.0)


def test_a_shared_start_is_read_once_a_step():
    # four NT of 110 prompt tokens, 100 of them the shared start: 140 tokens of prefill (1.4 s);
    # one step of 4 rows reads the start once and each row's 10 own slots and its half token
    # (0.5 on average over the step): 142 slots x 1,000 B at 1e4 B/s = 14.2 s, beside 0.1 s
    work = Workload((tuple((BaseWork("NT", 110, 100),) for _ in range(4)),), 2, 2)
    line = units_timeline(work, HALF, rates(kv=1000, bw=1e4))
    assert line.seconds == pytest.approx(1.4 + 0.1 + 14.2)


def test_each_seed_is_a_unit_of_its_own():
    # one problem, seeds 0 and 1: two engine calls of one row (0.1 s prefill, 10 steps of 0.1 s)
    # each, not one call of two rows (10 steps of 0.3 s)
    problem = (BaseWork("NT", 10, 0, seed=0), BaseWork("NT", 10, 0, seed=1))
    work = Workload(((problem,),), 20, 10)
    line = units_timeline(work, HALF, rates(decode=((1, 0.1), (2, 0.3))))
    assert line.seconds == pytest.approx(2 * (0.1 + 10 * 0.1))


def test_cpu_workers_share_a_campaign_runs_problems():
    from dataclasses import replace

    from nudgeability.costs.estimate.campaign import TaskShape, estimate_campaign

    shape = TaskShape({"NT": 10.0, "B": 12.0}, {"NT": 0, "B": 0}, {"B": (3, 3)})
    one = replace(load_campaign(), tasks=("strategyqa",), problems=2)
    four = replace(one, problems=4)
    measured = rates(decode=((1, 0.1), (64, 0.2)), weight=10**8)
    halves = estimate_campaign(four, measured, 1e8, {"strategyqa": shape}, "stream", None, 2)
    alone = estimate_campaign(one, measured, 1e8, {"strategyqa": shape}, "stream", None, 1)
    for two_workers, half in zip(halves.runs, alone.runs):
        assert two_workers.wall_seconds == pytest.approx(half.wall_seconds)
        assert two_workers.generated_tokens == pytest.approx(2 * half.generated_tokens)


@pytest.mark.parametrize(
    "cuts, samples, copies",
    [(None, 1, 1), ("0.25,0.5", 1, 3), ("sentences:2,4,6", 3, 12), ("all", 2, 18)],
)
def test_each_arm_runs_once_per_cut_and_sample(cuts, samples, copies):
    from nudgeability.costs.estimate.workload import ALL_CUTS_ASSUMED, arm_copies
    from nudgeability.splice.run.config import RunConfig

    config = RunConfig(cuts=cuts, samples_per_arm=samples)
    # the paper's cut, plus the spec's cuts (--cuts all: the assumed count), times the samples
    assert ALL_CUTS_ASSUMED == 8
    assert arm_copies(config) == copies
