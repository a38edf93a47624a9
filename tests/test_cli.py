import csv
import io
import json
import pathlib
import sqlite3

import pytest
from click.testing import CliRunner

import autotune
import autotune.kernels.vector_add.add as vector_add
from autotune import gpu
from autotune.cli import main
from autotune.db import ConfigStore

SHIPPED = str(pathlib.Path(autotune.__file__).parent / "db" / "shipped.sqlite")


@pytest.fixture
def cli():
    return CliRunner()


def test_verify_prints_a_table_and_passes_the_shipped_kernel(cli):
    result = cli.invoke(main, ["verify", "vector_add", "--examples", "10", "--dtype", "fp16"])
    assert result.exit_code == 0, result.output
    assert "pass" in result.output and "fp16" in result.output


def test_verify_takes_a_module_attr_path_and_exits_nonzero_on_a_wrong_config(cli):
    config = json.dumps({"BLOCK_SIZE": 2048, "num_warps": 4, "num_stages": 1})
    result = cli.invoke(
        main, ["verify", "wrong_kernels:TAIL_BUG_ADD", "--config", config, "--dtype", "fp32", "--examples", "60"]
    )
    assert result.exit_code == 1
    assert "FAIL" in result.output and "incorrect on" in result.output and '"shape"' in result.output


def test_bad_arguments_are_one_clear_line_not_a_traceback(cli):
    cases = [
        (["verify", "no_such_kernel"], "unknown kernel 'no_such_kernel'"),
        (["verify", "vector_add", "--config", '{"BLOCK_SIZE": 3}'], "BLOCK_SIZE"),
        (["verify", "vector_add", "--dtype", "int8"], "dtype 'int8'"),
        (["search", "vector_add", "--gpu", "H100", "--trials", "1"], "a search measures the GPU it runs on"),
        (["search", "vector_add", "--shape", "12xfoo", "--trials", "1"], "expected sizes separated by 'x'"),
        (["search", "vector_add", "--warm-start", '{"BLOCK_SIZE": 3}'], "BLOCK_SIZE=3 is not one of"),
        (["search", "vector_add", "--warm-start", "[256, 4]"], "expected a JSON object"),
        (["search", "vector_add", "--trials", "0"], "Invalid value for '--trials'"),
        (["search", "vector_add", "--examples", "-1"], "Invalid value for '--examples'"),
        (["search", "vector_add", "--timeout", "0"], "Invalid value for '--timeout'"),
        (["verify", "vector_add", "--examples", "0"], "Invalid value for '--examples'"),
        (["retune", "--trials", "0"], "Invalid value for '--trials'"),
        (["retune", "--examples", "0"], "Invalid value for '--examples'"),
        (
            ["db", "export", "--gpu", "H100", "--db", SHIPPED, "-o", "/no/such/folder/x.sqlite"],
            "cannot write /no/such/folder/x.sqlite",
        ),
        (["search", "vector_add", "--storage", "nosuch://x"], "storage nosuch://x: Can't load plugin"),
        (
            ["search", "vector_add", "--storage", "/no/such/folder/j.log"],
            "no folder /no/such/folder to keep the journal",
        ),
        (  # no server there: said, the password masked
            ["search", "vector_add", "--storage", "postgresql://u:secret@127.0.0.1:1/db"],
            "storage postgresql://u:***@127.0.0.1:1/db: (psycopg.OperationalError)",
        ),
    ]
    for args, message in cases:
        result = cli.invoke(main, args)
        assert result.exit_code != 0, args
        assert message in result.output, (args, result.output)
        assert "Traceback" not in result.output and "secret" not in result.output


def test_search_then_query_shows_the_stored_row_in_every_format(cli, user_db):
    result = cli.invoke(
        main, ["search", "vector_add", "--dtype", "fp32", "--shape", "3000", "--trials", "4", "--examples", "3"]
    )
    assert result.exit_code == 0, result.output
    assert "n=4096" in result.output and "True" in result.output
    assert "final check of {" in result.output and "passed (" in result.output  # heard as it ends, not at the end

    table = cli.invoke(main, ["query", "vector_add"])
    assert table.exit_code == 0 and gpu.CPU_INTERPRETER in table.output and "n=4096" in table.output
    here = ["--gpu", gpu.CPU_INTERPRETER]
    rows = json.loads(cli.invoke(main, ["query", "vector_add", "--format", "json", *here]).output)
    assert len(rows) == 1 and rows[0]["bucket"] == "n=4096" and rows[0]["current"] is True
    assert rows[0]["source"] == f"sqlite:///{user_db}"
    assert vector_add.SPACE.validate(json.loads(rows[0]["config"]))
    parsed = list(
        csv.DictReader(io.StringIO(cli.invoke(main, ["query", "vector_add", "--format", "csv", *here]).output))
    )
    assert [r["bucket"] for r in parsed] == ["n=4096"]
    # --gpu selects another GPU's rows and needs no such GPU here: the H100 rows shipped in the package.
    h100 = json.loads(cli.invoke(main, ["query", "vector_add", "--gpu", "h100", "--format", "json"]).output)
    assert h100 and {r["gpu"] for r in h100} == {"H100"} and {r["source"] for r in h100} == {"shipped"}


def test_db_export_and_merge_move_rows_between_files(cli, user_db, tmp_path):
    assert (
        cli.invoke(
            main, ["search", "vector_add", "--dtype", "fp32", "--shape", "100", "--trials", "2", "--examples", "2"]
        ).exit_code
        == 0
    )
    exported = tmp_path / "cpu.sqlite"
    result = cli.invoke(main, ["db", "export", "--gpu", gpu.CPU_INTERPRETER, "-o", str(exported)])
    assert result.exit_code == 0 and "exported 1 row" in result.output
    assert cli.invoke(main, ["db", "export", "--gpu", gpu.CPU_INTERPRETER, "-o", str(exported)]).exit_code != 0

    target = tmp_path / "other.sqlite"
    result = cli.invoke(main, ["db", "merge", str(exported), "--db", str(target)])
    assert result.exit_code == 0 and "1 row(s) read, 1 taken" in result.output
    with sqlite3.connect(target) as con:
        assert con.execute("select kernel, bucket from best_configs").fetchall() == [("vector_add", "n=128")]


def test_a_registered_user_kernel_is_reachable_by_name(cli):
    import dataclasses

    spec = dataclasses.replace(vector_add.SPEC, name="my_add", _hash=[])
    autotune.register(spec)
    assert autotune.get("my_add") is spec and "my_add" in autotune.names()
    with pytest.raises(ValueError, match="already registered"):
        autotune.register(dataclasses.replace(spec, name="vector_add"))
    result = cli.invoke(main, ["verify", "my_add", "--examples", "5", "--dtype", "fp32"])
    assert result.exit_code == 0 and "my_add" in result.output


def test_db_export_leaves_out_and_db_prune_deletes_rows_tuned_for_an_older_kernel_source(cli, user_db, tmp_path):
    import dataclasses

    from autotune.db import ConfigStore

    assert (
        cli.invoke(
            main, ["search", "vector_add", "--dtype", "fp32", "--shape", "100", "--trials", "2", "--examples", "2"]
        ).exit_code
        == 0
    )
    with ConfigStore(str(user_db)) as store:
        (row,) = store.best_rows(kernel="vector_add")
        store.record_best(dataclasses.replace(row, source_hash="0" * 16, bucket="n=256"))
    current, everything = tmp_path / "current.sqlite", tmp_path / "all.sqlite"
    assert (
        "exported 1 row" in cli.invoke(main, ["db", "export", "--gpu", gpu.CPU_INTERPRETER, "-o", str(current)]).output
    )
    result = cli.invoke(main, ["db", "export", "--gpu", gpu.CPU_INTERPRETER, "-o", str(everything), "--all-sources"])
    assert "exported 2 row" in result.output
    with sqlite3.connect(current) as con:
        assert con.execute("select source_hash from best_configs").fetchall() == [(vector_add.SPEC.source_hash,)]
    # db prune deletes the old source's row in place, and only that one.
    assert "deleted 1 row(s)" in cli.invoke(main, ["db", "prune"]).output
    with sqlite3.connect(user_db) as con:
        assert con.execute("select source_hash from best_configs").fetchall() == [(vector_add.SPEC.source_hash,)]
    assert "deleted 0 row(s)" in cli.invoke(main, ["db", "prune"]).output
    assert "no database at" in cli.invoke(main, ["db", "prune", "--db", str(tmp_path / "none.sqlite")]).output


def test_search_re_verifies_its_winner_on_as_many_final_examples_as_asked(cli, user_db):
    result = cli.invoke(
        main,
        [
            "search",
            "vector_add",
            "--dtype",
            "fp32",
            "--shape",
            "3000",
            "--trials",
            "2",
            "--examples",
            "3",
            "--final-examples",
            "6",
        ],
    )
    assert result.exit_code == 0, result.output
    row = json.loads(
        cli.invoke(main, ["query", "vector_add", "--format", "json", "--gpu", gpu.CPU_INTERPRETER]).output
    )[0]
    # 3 problems and the timed one per trial, then the final check's 6 draws and the bucket's edges
    assert 3 + 1 + 6 <= row["examples"] < 3 + 1 + 6 + 4
    refused = cli.invoke(main, ["search", "vector_add", "--final-examples", "0"])
    assert refused.exit_code != 0 and "--final-examples" in refused.output


def test_search_tries_the_warm_start_configs_given_right_after_the_default(cli, user_db):
    result = cli.invoke(
        main,
        [
            "search",
            "vector_add",
            "--dtype",
            "fp32",
            "--shape",
            "3000",
            "--trials",
            "3",
            "--examples",
            "2",
            "--final-examples",
            "2",
            "--warm-start",
            '{"BLOCK_SIZE": 256, "num_warps": 2}',
            "--warm-start",
            '{"BLOCK_SIZE": 8192}',
        ],
    )
    assert result.exit_code == 0, result.output
    with ConfigStore(str(user_db)) as store:
        tried = [json.loads(t.config_json) for t in sorted(store.trials(kernel="vector_add"), key=lambda t: t.number)]
    default = vector_add.SPACE.default
    assert tried == [default, {**default, "BLOCK_SIZE": 256, "num_warps": 2}, {**default, "BLOCK_SIZE": 8192}]


@pytest.mark.parametrize(
    "options, message",
    [
        ({"trials": 0}, "trials must be an integer >= 1, got 0"),
        ({"examples": -3}, "examples must be an integer >= 1, got -3"),
        ({"final_examples": 2.5}, "final_examples must be an integer >= 1, got 2.5"),
        ({"timeout": -1.0}, "timeout must be a number of seconds > 0"),
        ({"max_numel": 0}, "max_numel must be an integer >= 1"),
    ],
)
def test_search_options_out_of_range_are_refused_naming_the_argument(options, message):
    from autotune.engine.plan import SearchOptions

    with pytest.raises(ValueError, match=message):
        SearchOptions(**options)


def test_library_verify_refuses_a_negative_number_of_examples_and_takes_zero_as_the_extra_problems_only():
    import torch

    from autotune.gate.verify import verify

    spec = autotune.get("vector_add")
    with pytest.raises(ValueError, match="examples must be an integer >= 0"):
        verify(spec, dict(spec.space.default), torch.float32, examples=-1)
    only_extra = verify(spec, dict(spec.space.default), torch.float32, examples=0, extra_problems=[{"shape": [1000]}])
    assert only_extra.passed and only_extra.examples == 1
