"""The tools as functions: each equals what the command-line tool writes."""

import json
import subprocess

import numpy as np
import pytest

import gearbox

# Fields that measure the machine, not the replay.
WALL_CLOCK_FIELDS = {"wall_seconds"}


def without_wall_clock(summary):
    return {k: v for k, v in summary.items() if k not in WALL_CLOCK_FIELDS}


@pytest.fixture(scope="module")
def prefill_csv(tmp_path_factory, cli, azure_trace):
    """The Azure trace's prefill view, converted by the CLI (as scripts/main-job.sh does)."""
    out = tmp_path_factory.mktemp("trace") / "azure_prefill.csv"
    subprocess.run([cli, "trace", "convert", "--format", "azure", "--view", "prefill",
                    "--input", azure_trace, "--output", out], check=True, capture_output=True)
    return out


def cli_summary(cli, tmp_path, *args):
    out = tmp_path / "summary.json"
    subprocess.run([cli, "replay", *map(str, args), "--summary", out], check=True,
                   capture_output=True)
    return json.loads(out.read_text())


# ---------------------------------------------------------------- replay


@pytest.mark.parametrize("policy", ["static", "adaptive", "replan"])
def test_replay_equals_the_cli_summary(policy, cli, tmp_path, prefill_config, prefill_csv):
    expected = cli_summary(cli, tmp_path, "--config", prefill_config, "--trace", prefill_csv,
                           "--policy", policy)
    got = gearbox.replay(prefill_config, prefill_csv, policy=policy)
    assert without_wall_clock(got) == without_wall_clock(expected)
    assert got["policy"] == policy and got["requests"] == 19366


def test_replay_with_options_equals_the_cli(cli, tmp_path, prefill_config, prefill_csv):
    expected = cli_summary(cli, tmp_path, "--config", prefill_config, "--trace", prefill_csv,
                           "--policy", "adaptive", "--optimum", "--update-at", "600,1800,3000",
                           "--bucket-seconds", "120")
    decisions = []
    got = gearbox.replay(str(prefill_config), str(prefill_csv), policy="adaptive", optimum=True,
                         update_at=[600, 1800, 3000], bucket_seconds=120, decisions=decisions)
    assert without_wall_clock(got) == without_wall_clock(expected)
    assert "offline_optimum" in got
    assert [d["time"] for d in decisions] == [600, 1800, 3000]


def test_replay_of_a_numpy_trace_equals_the_file(prefill_config, prefill_csv):
    config = json.loads(prefill_config.read_text())
    data = np.loadtxt(prefill_csv, delimiter=",", skiprows=1)
    from_array = gearbox.replay(config, data, policy="replan")
    from_file = gearbox.replay(json.dumps(config), prefill_csv, policy="replan")
    assert without_wall_clock(from_array) == without_wall_clock(from_file)


def test_replay_errors(prefill_config, prefill_csv):
    with pytest.raises(ValueError, match="policy"):
        gearbox.replay(prefill_config, prefill_csv, policy="sometimes")
    with pytest.raises(ValueError, match="scheme"):
        gearbox.replay(prefill_config, prefill_csv, scheme="diagonal")
    with pytest.raises(ValueError, match="no_such_trace.csv"):
        gearbox.replay(prefill_config, "no_such_trace.csv")
    with pytest.raises(ValueError, match="shape"):
        gearbox.replay(prefill_config, np.zeros((3, 5)))
    with pytest.raises(ValueError, match="sorted"):
        gearbox.replay(prefill_config, np.array([[2.0, 5], [1.0, 5]]))
    with pytest.raises(ValueError, match="SEQLEN"):
        gearbox.replay(prefill_config, np.array([[0.0, 1.5]]))
    with pytest.raises(TypeError):
        gearbox.replay(prefill_config, None)
    with pytest.raises(TypeError):
        gearbox.replay(prefill_config, prefill_csv, decisions="not a list")


# ---------------------------------------------------------------- plan_gears


def cli_plan(cli, trace, *args):
    out = subprocess.run([cli, "plan", "--trace", trace, "--dim", "SEQLEN", "--json", *args],
                         check=True, capture_output=True, text=True).stdout
    result = json.loads(out)
    del result["dim"]
    return result


@pytest.mark.parametrize("args,kwargs", [
    (["--gears", "8"], {"k": 8}),
    (["--gears", "6", "--method", "kmeans", "--seed", "3"], {"k": 6, "method": "kmeans", "seed": 3}),
    (["--gears", "5", "--method", "quantile"], {"k": 5, "method": "quantile"}),
    (["--gears", "4", "--splittable", "true"], {"k": 4, "splittable": True}),
    (["--budget", "16", "--compile-seconds", "20"], {"budget": 16, "cost": {"compile_seconds": 20}}),
])
def test_plan_gears_equals_the_cli(args, kwargs, cli, prefill_csv):
    expected = cli_plan(cli, prefill_csv, *args)
    sizes = np.loadtxt(prefill_csv, delimiter=",", skiprows=1, usecols=1).astype(np.int64)
    got = gearbox.plan_gears(sizes, **kwargs)
    assert {k: got[k] for k in expected} == expected


def test_plan_gears_inputs():
    sizes = [1, 2, 3, 10, 10, 10, 100]
    from_list = gearbox.plan_gears(sizes, 3)
    assert from_list["gears"][-1] == 100 and len(from_list["gears"]) <= 3
    for array in (np.array(sizes, dtype=np.int64), np.array(sizes, dtype=np.int32),
                  np.array(sizes, dtype=np.uint16)):
        assert gearbox.plan_gears(array, 3) == from_list
    strided = np.repeat(np.array(sizes, dtype=np.int64), 2)[::2]  # not contiguous: copied
    assert gearbox.plan_gears(strided, 3) == from_list
    assert from_list["raw"] == sum(sizes)
    with pytest.raises(TypeError):
        gearbox.plan_gears(np.array([1.5, 2.0]), 2)
    with pytest.raises(TypeError):
        gearbox.plan_gears(None, 2)
    with pytest.raises(ValueError, match=r"sizes\[1\]"):
        gearbox.plan_gears([3, 0], 2)
    with pytest.raises(ValueError, match="exactly one"):
        gearbox.plan_gears(sizes)
    with pytest.raises(ValueError, match="exactly one"):
        gearbox.plan_gears(sizes, 2, budget=3)
    with pytest.raises(ValueError, match="k"):
        gearbox.plan_gears(sizes, 0)
    with pytest.raises(ValueError, match="method"):
        gearbox.plan_gears(sizes, 2, method="magic")
    with pytest.raises(ValueError, match="cost.speed"):
        gearbox.plan_gears(sizes, budget=2, cost={"speed": 1})
    with pytest.raises(ValueError, match="empty"):
        gearbox.plan_gears([], 2)


# ---------------------------------------------------------------- convert_trace


def test_convert_trace_equals_the_cli(cli, tmp_path, azure_trace):
    expected = tmp_path / "cli.csv"
    subprocess.run([cli, "trace", "convert", "--format", "azure", "--view", "prefill", "--input",
                    azure_trace, "--output", expected], check=True, capture_output=True)
    out = tmp_path / "python.csv"
    data, columns = gearbox.convert_trace(azure_trace, format="azure", output=out)
    assert out.read_bytes() == expected.read_bytes()
    assert columns == ["t", "SEQLEN"]
    assert data.dtype == np.float64 and data.shape == (19366, 2)
    np.testing.assert_allclose(data, np.loadtxt(expected, delimiter=",", skiprows=1), atol=1e-6)


def test_convert_trace_decode_view_of_lengths(cli, tmp_path):
    lengths = tmp_path / "lengths.csv"
    lengths.write_text("prompt_tokens,output_tokens\n100,3\n20,5\n7,1\n")
    expected = tmp_path / "cli.csv"
    subprocess.run([cli, "trace", "convert", "--format", "lengths", "--view", "decode",
                    "--rate", "50", "--seed", "7", "--step-ms", "10", "--max-running", "2",
                    "--input", lengths, "--output", expected], check=True, capture_output=True)
    out = tmp_path / "python.csv"
    data, columns = gearbox.convert_trace(lengths, format="lengths", view="decode", rate=50,
                                          seed=7, step_ms=10, max_running=2, output=str(out))
    assert out.read_bytes() == expected.read_bytes()
    assert columns == ["t", "BATCHSIZE", "SEQLEN"]
    assert data.shape[1] == 3 and data.shape[0] >= 5
    assert data[:, 1].max() <= 2


def test_convert_trace_errors(tmp_path, azure_trace):
    with pytest.raises(ValueError, match="format"):
        gearbox.convert_trace(azure_trace, format="parquet")
    with pytest.raises(ValueError, match="view"):
        gearbox.convert_trace(azure_trace, format="azure", view="both")
    with pytest.raises(ValueError, match="cannot open"):
        gearbox.convert_trace(tmp_path / "missing.csv", format="azure")
    with pytest.raises(ValueError, match="not a regular file"):
        gearbox.convert_trace(tmp_path, format="azure")
    with pytest.raises(TypeError):
        gearbox.convert_trace(None, format="azure")
    with pytest.raises(TypeError):
        gearbox.convert_trace(azure_trace)  # format is required


def test_replay_of_a_numpy_trace_with_mem_usage_equals_the_file(tmp_path, cli):
    config = {"dims": [{"name": "BATCHSIZE", "gears": [8, 64], "splittable": True}],
              "adaptive": {"check_interval_seconds": 10, "update_interval_seconds": 600,
                           "recent_use_protect_seconds": 0, "min_samples_per_gear": 1}}
    rng = np.random.default_rng(1)
    t = np.arange(400, dtype=np.float64)
    data = np.column_stack([t, rng.integers(1, 40, size=400), np.where(t > 200, 0.97, 0.5)])
    path = tmp_path / "trace.csv"
    with open(path, "w") as f:
        f.write("t,BATCHSIZE,mem_usage\n")
        for row in data:
            f.write(f"{row[0]:.6f},{int(row[1])},{row[2]}\n")
    (tmp_path / "config.json").write_text(json.dumps(config))
    expected = cli_summary(cli, tmp_path, "--config", tmp_path / "config.json", "--trace", path,
                           "--policy", "adaptive")
    got = gearbox.replay(config, data, policy="adaptive")
    assert without_wall_clock(got) == without_wall_clock(expected)
    assert got["updates"] >= 1  # memory pressure triggers updates before the interval
    with pytest.raises(ValueError, match="mem_usage"):
        gearbox.replay(config, np.array([[0.0, 4, 1.5]]))


# ---------------------------------------------------------------- emit_server_config


@pytest.mark.parametrize("server,extra", [
    ("vllm", []), ("sglang", ["--max-running-requests", "40", "--clip-to-max"]), ("trtllm", []),
    ("vllm", ["--speculative-tokens", "3"]),
])
def test_emit_server_config_equals_the_cli(tmp_path, cli, server, extra):
    sizes = [3, 5, 5, 9, 17, 17, 17, 33, 40, 47, 12, 12, 6]
    trace = tmp_path / "trace.csv"
    trace.write_text("t,BATCHSIZE\n" + "".join(f"{i},{s}\n" for i, s in enumerate(sizes)))
    printed = subprocess.run([str(cli), "plan", "--trace", str(trace), "--dim", "BATCHSIZE",
                          "--gears", "4", "--emit", server, *extra],
                         capture_output=True, text=True, check=True)
    gears = gearbox.plan_gears(sizes, 4)["gears"]
    kwargs = {}
    if "--max-running-requests" in extra:
        kwargs = {"max_num_seqs": 40, "clip_to_max": True}
    if "--speculative-tokens" in extra:
        kwargs = {"speculative_tokens": 3}
    out = gearbox.emit_server_config(gears, server=server, **kwargs)
    assert out["text"] == printed.stdout
    assert out["server"] == server


def test_emit_server_config_errors_name_the_option():
    with pytest.raises(ValueError, match="server.*tgi.*vllm, sglang or trtllm"):
        gearbox.emit_server_config([1, 2], server="tgi")
    with pytest.raises(ValueError, match="40"):
        gearbox.emit_server_config([8, 47], max_num_seqs=40)
    out = gearbox.emit_server_config([8, 47], max_num_seqs=40, clip_to_max=True)
    assert out["sizes"] == [8, 40]
    with pytest.raises(TypeError):
        gearbox.emit_server_config(None)
