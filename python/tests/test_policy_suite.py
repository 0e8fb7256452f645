"""scripts/policy_suite.py's leave-one-out (docs/POLICY.md, "The policy suite"):
the value chosen for a trace comes from the other traces, decode views'
churn and sparse uncompiled steps count where the suite replayed the grid
there, and ties go to the value no worse anywhere."""
import importlib.util
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "policy_suite.py")
spec = importlib.util.spec_from_file_location("policy_suite", SCRIPT)
policy_suite = importlib.util.module_from_spec(spec)
spec.loader.exec_module(policy_suite)


def run(waste, optimum, compiles_per_hour=10.0, graphs=10.0, cycles=1, changes=0):
    return {"policy": "replan", "padding_waste": waste, "avg_graphs": graphs,
            "compiles_per_hour": compiles_per_hour, "trace_seconds": 3600.0,
            "max_gear_cycles_per_hour": cycles, "max_gear_set_changes_in_25_updates": changes,
            "offline_optimum": {"SEQLEN": {"same_graph_count": {"waste": optimum, "gears": 10}}}}


def write(directory, name, obj):
    with open(os.path.join(directory, name), "w") as f:
        json.dump(obj, f)


def by_trace(result):
    return {p["trace"]: p["chosen"] for p in result["held_out"]}


def test_a_decode_views_churn_steers_the_choice(tmp_path):
    # Value "b" has the better prefill ratio everywhere; on trace t1's decode
    # view it compiles 30 an hour per graph (> 2): chosen on the others, t1
    # still gets "b" (its own decode view is held out with it), t2 and t3 "a".
    for t in ("t1", "t2", "t3"):
        write(tmp_path, f"{t}.prefill.grid-k-a.json", run(0.12, 0.1))
        write(tmp_path, f"{t}.prefill.grid-k-b.json", run(0.11, 0.1))
        write(tmp_path, f"{t}.decode.grid-k-a.json", run(0.2, 0.1))
        write(tmp_path, f"{t}.decode.grid-k-b.json",
              run(0.2, 0.1, compiles_per_hour=300.0 if t == "t1" else 10.0))
    result = policy_suite.leave_one_out(str(tmp_path), "k", ["a", "b"])
    assert by_trace(result) == {"t1": "b", "t2": "a", "t3": "a"}
    assert result["chosen_on_all"] == "a"
    assert result["views_breaking_by_value"] == {"a": 0, "b": 1}
    held = {p["trace"]: p for p in result["held_out"]}
    assert abs(held["t1"]["ratio"] - 1.1) < 1e-9
    assert held["t1"]["decode_compiles_per_hour_per_graph"] == 300.0 / 10.0


def test_without_decode_grids_the_prefill_views_decide(tmp_path):
    for t in ("t1", "t2"):
        write(tmp_path, f"{t}.prefill.grid-k-a.json", run(0.12, 0.1))
        write(tmp_path, f"{t}.prefill.grid-k-b.json", run(0.11, 0.1))
    result = policy_suite.leave_one_out(str(tmp_path), "k", ["a", "b"])
    assert by_trace(result) == {"t1": "b", "t2": "b"}


def test_a_tie_on_worst_and_median_goes_to_the_value_better_somewhere(tmp_path):
    # "b" equals "a" on t1..t4 and is better on t5: worst and median tie, the
    # mean does not; "a" comes first in the grid.
    for i in range(1, 6):
        write(tmp_path, f"t{i}.prefill.grid-k-a.json", run(0.12, 0.1))
        write(tmp_path, f"t{i}.prefill.grid-k-b.json", run(0.11 if i == 5 else 0.12, 0.1))
    result = policy_suite.leave_one_out(str(tmp_path), "k", ["a", "b"])
    assert result["chosen_on_all"] == "b"
    assert by_trace(result)["t5"] == "a"  # on the others the two are equal: the grid's order


def test_sets_tells_whether_a_config_sets_a_replan_key(tmp_path):
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"dims": [], "replan": {"min_gear_lifetime_seconds": 3600}}))
    call = [sys.executable, SCRIPT, "sets", str(config)]
    assert subprocess.run(call + ["min_gear_lifetime_seconds"]).returncode == 0
    assert subprocess.run(call + ["drift_agreement"]).returncode == 1


def test_the_sparse_schemes_uncompiled_steps_count_as_a_broken_view(tmp_path):
    # "b" has the better prefill ratio everywhere and keeps the churn targets,
    # but runs 1.5 % of t1's and t2's decode steps uncompiled in the sparse
    # scheme (the target: at most 1 %): whichever trace is held out, another
    # breaks at "b", so "a" is chosen for each.
    for t in ("t1", "t2", "t3"):
        write(tmp_path, f"{t}.prefill.grid-k-a.json", run(0.12, 0.1))
        write(tmp_path, f"{t}.prefill.grid-k-b.json", run(0.11, 0.1))
        for v, eager in (("a", 0), ("b", 150 if t != "t3" else 0)):
            sparse = run(0.2, 0.1)
            sparse.update({"eager_requests": eager, "requests": 10000})
            write(tmp_path, f"{t}.decode.sparse.grid-k-{v}.json", sparse)
    result = policy_suite.leave_one_out(str(tmp_path), "k", ["a", "b"])
    assert result["views_breaking_by_value"] == {"a": 0, "b": 2}
    assert by_trace(result) == {"t1": "a", "t2": "a", "t3": "a"}
    assert result["chosen_on_all"] == "a"
    held = {p["trace"]: p for p in result["held_out"]}
    assert held["t1"]["decode_sparse_eager_share"] == 0.0
    # At 1 % exactly the target holds.
    for t in ("t1", "t2"):
        sparse = run(0.2, 0.1)
        sparse.update({"eager_requests": 100, "requests": 10000})
        write(tmp_path, f"{t}.decode.sparse.grid-k-b.json", sparse)
    assert policy_suite.leave_one_out(str(tmp_path), "k", ["a", "b"])["chosen_on_all"] == "b"


def test_flapping_breaks_a_view_of_a_stationary_scenario_only(tmp_path):
    # "b" has the better ratio everywhere but changes the gears 3 times in 25
    # updates after warm-up (the target: at most 2) on every trace: a break on
    # the stationary scenarios (their TRACE.kind says so: poisson-azure, its
    # draw of seed 2, bimodal's decode view), not on drift-up, whose traffic
    # moves.
    for t in ("poisson-azure", "poisson-azure-s2", "bimodal"):
        with open(tmp_path / f"{t}.kind", "w") as f:
            f.write("scenario stationary\n")
    with open(tmp_path / "drift-up.kind", "w") as f:
        f.write("scenario\n")
    for t in ("poisson-azure", "poisson-azure-s2", "drift-up", "bimodal"):
        write(tmp_path, f"{t}.prefill.grid-k-a.json", run(0.12, 0.1, changes=2))
        write(tmp_path, f"{t}.prefill.grid-k-b.json",
              run(0.11, 0.1, changes=3 if t != "bimodal" else 0))
    write(tmp_path, "bimodal.decode.grid-k-a.json", run(0.2, 0.1))
    write(tmp_path, "bimodal.decode.grid-k-b.json", run(0.2, 0.1, changes=3))
    result = policy_suite.leave_one_out(str(tmp_path), "k", ["a", "b"])
    assert result["views_breaking_by_value"] == {"a": 0, "b": 3}
    assert result["chosen_on_all"] == "a"
    held = {p["trace"]: p for p in result["held_out"]}
    assert held["drift-up"]["flapping"] == 0  # not a stationary scenario: no target
    assert held["poisson-azure-s2"]["flapping"] == 2


def test_the_table_sets_the_ratio_beside_the_other_half_optimum(tmp_path, capsys):
    # A prefill view whose summary has the optimum planned on the other half
    # (gearbox replay --optimum: "other_half_waste") gets its ratio to it; a
    # summary without one (an older gearbox) and a decode view get none, and
    # the summary's other-half figures come from the views that have one.
    for t in ("t1", "t2"):
        with open(tmp_path / f"{t}.kind", "w") as f:
            f.write("scenario\n")
    with_half = run(0.12, 0.08, graphs=10.0)
    with_half["offline_optimum"]["SEQLEN"]["same_graph_count"]["other_half_waste"] = 0.1
    for r in (with_half, run(0.3, 0.1)):
        r.update({"requests": 100, "peak_graphs": 10, "compiles": 10, "short_lived_gears": 0,
                  "eager_requests": 0, "rejected_requests": 0})
    write(tmp_path, "t1.prefill.main.json", with_half)
    write(tmp_path, "t2.prefill.main.json", run(0.3, 0.1) | {
        k: v for k, v in with_half.items() if k not in ("padding_waste", "offline_optimum")})
    rows = {r["trace"]: r for r in policy_suite.collect(str(tmp_path))}
    assert abs(rows["t1"]["ratio"] - 1.5) < 1e-9
    assert abs(rows["t1"]["other_half_ratio"] - 1.2) < 1e-9
    assert rows["t2"]["other_half_waste"] is None and rows["t2"]["other_half_ratio"] is None
    (summary,) = policy_suite.summarize(list(rows.values()))
    assert summary["ratio"]["worst_trace"] == "t2"
    assert summary["other_half_ratio"]["worst_trace"] == "t1"
    policy_suite.print_tables(list(rows.values()), [summary], [])
    table = capsys.readouterr().out
    assert "| 10.0% (1.20) |" in table and "| 3.00 | — |" in table


def test_the_synthesizer_marks_the_stationary_scenarios(cli):
    # policy-suite.sh reads the second column of --list for TRACE.kind.
    marks = dict(line.split()[:2] for line in subprocess.run(
        [str(cli), "trace", "synth", "--list"], capture_output=True, text=True,
        check=True).stdout.splitlines() if line.strip())
    assert marks["poisson-azure"] == marks["long-mix"] == "stationary"
    assert marks["diurnal"] == marks["drift-up"] == "changing"
    assert set(marks.values()) == {"stationary", "changing"}


SUITE = os.path.join(HERE, "..", "..", "scripts", "policy-suite.sh")


def test_configs_names_the_missing_config_before_building(tmp_path):
    # Checked before anything is built or replayed: exit 2 naming the flag,
    # the directory (a relative one is the caller's) and the missing file.
    (tmp_path / "mine").mkdir()
    r = subprocess.run(["bash", SUITE, "--configs", "mine"], cwd=tmp_path,
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert f'--configs "{tmp_path}/mine"' in r.stderr
    assert "prefill_times.json" in r.stderr
    (tmp_path / "mine" / "prefill_times.json").write_text("{}")
    r = subprocess.run(["bash", SUITE, "--configs", str(tmp_path / "mine")],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert "no readable decode_times.json" in r.stderr
    # The long-context scenarios' configs likewise.
    r = subprocess.run(["bash", SUITE, "--long-configs", "mine"], cwd=tmp_path,
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert f'--long-configs "{tmp_path}/mine"' in r.stderr
    assert "no readable decode_times.json" in r.stderr
