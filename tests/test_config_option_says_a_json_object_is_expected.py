"""A --config (or --warm-start) that is not a JSON object is one error naming the option and what it expects."""

from click.testing import CliRunner

from autotune.cli import main


def test_not_json_names_the_option_and_the_form_expected():
    for args in (["verify", "softmax", "--config", "notjson"], ["search", "softmax", "--warm-start", "notjson"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2, result.output
        option = args[2]
        assert (
            f"Error: Invalid value for {option}: expected a JSON object of parameter values like "
            """'{"variant": "online"}', got 'notjson', which is not JSON"""
        ) in result.stderr, result.stderr
        assert "Traceback" not in result.output


def test_json_that_is_not_an_object_says_so():
    result = CliRunner().invoke(main, ["verify", "softmax", "--config", "[1024]"])
    assert result.exit_code == 2
    assert "Invalid value for --config: expected a JSON object of parameter values" in result.stderr
    assert "got '[1024]'" in result.stderr
