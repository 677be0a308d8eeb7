"""The converters read steps, calls, statuses and effects out of each recorded format."""

from benchmarks.trajectories import codeact, mini_swe_agent, swe_agent
from benchmarks.trajectories.runlog import run_started
from tests.benchmarks.trajectories.authored import EDITOR_LOOP, RESOLVED_EDIT_CYCLE, STALL


def test_mini_steps_become_bash_calls_with_status_from_the_return_code():
    traj = mini_swe_agent.convert(RESOLVED_EDIT_CYCLE, "authored", resolved=True)
    calls = [call for _, call in traj.calls]
    assert len(traj.steps) == 14 and len(calls) == 14
    assert calls[0].tool == "bash" and calls[0].args == {"command": "grep -rn 'def parse' src/"}
    assert [c.status for c in calls[3:6]] == ["error", "ok", "error"]
    assert calls[3].output.startswith("Traceback") and calls[2].output == ""  # tags unwrapped
    assert [c.effect for c in calls[:6]] == ["read", "read", "unknown", "unknown", "unknown", "unknown"]


def test_mini_format_error_is_a_step_without_a_call():
    traj = mini_swe_agent.convert(STALL, "authored", resolved=False)
    assert traj.steps[-1] == [] and all(traj.steps[:-1])


def test_openhands_tool_calls_with_editor_effects_and_error_markers():
    traj = codeact.convert_openhands(EDITOR_LOOP)
    calls = [call for _, call in traj.calls]
    assert not traj.resolved and len(traj.steps) == 15
    assert (calls[0].tool, calls[0].status, calls[0].effect) == ("execute_bash", "ok", "read")
    assert (calls[1].effect, calls[2].effect, calls[2].status) == ("read", "write", "error")
    assert calls[2].args["old_str"] == "return int(x)"


def test_bash_exit_code_marks_an_error():
    call = codeact._call(
        "execute_bash", {"command": "python r.py"}, "OBSERVATION:\nboom\n[Command finished with exit code 1]"
    )
    assert (call.status, call.effect) == ("error", "unknown")


def test_function_text_calls_are_parsed():
    record = {
        "instance_id": "x",
        "resolved": True,
        "messages": [
            {
                "role": "assistant",
                "content": "Look.\n\n<function=str_replace_editor>\n<parameter=command>view"
                "</parameter>\n<parameter=path>/testbed/a.py</parameter>\n</function>",
            },
            {"role": "user", "content": "OBSERVATION:\n     1\timport os\n"},
        ],
    }
    traj = codeact.convert_function_text(record)
    [(number, call)] = list(traj.calls)
    assert number == 1 and call.args == {"command": "view", "path": "/testbed/a.py"}
    assert (call.effect, call.status, call.output) == ("read", "ok", "     1\timport os\n")


def test_effects_are_declared_in_coder_mode_only():
    traj = codeact.convert_openhands(EDITOR_LOOP)
    assert run_started(traj, "coder")["tools"][0] == {"name": "execute_bash", "effect": "unknown"}
    assert run_started(traj, "researcher")["tools"][0] == {"name": "execute_bash"}


def test_round_limit_is_the_agents_own_and_policy_overrides_apply():
    traj = codeact.convert_openhands(EDITOR_LOOP)
    assert run_started(traj, "coder")["policy"] == {"max_rounds": 250}
    assert run_started(traj, "coder", {"stall_stop_at": 5})["policy"] == {
        "max_rounds": 250,
        "stall_stop_at": 5,
    }


def test_swe_agent_actions_become_calls_named_by_command():
    traj = swe_agent.convert(
        {
            "trajectory": [
                {"action": 'find_file "Parser.java"\n', "observation": "Found 1 matches"},
                {"action": "open src/Parser.java", "observation": "[File: src/Parser.java (90 lines total)]"},
                {
                    "action": "edit 3:3\n    return x;\nend_of_edit",
                    "observation": (
                        "Your proposed edit has introduced new syntax error(s). "
                        "Please read this error message"
                    ),
                },
                {
                    "action": "javac Parser.java",
                    "observation": "/bin/bash: line 12: javac: command not found",
                },
                {"action": "cd src", "observation": ""},
                {"action": "exit_cost", "observation": "Exited (autosubmitted)"},
            ]
        },
        "run",
        resolved=False,
    )
    calls = [call for _, call in traj.calls]
    assert len(traj.steps) == 5  # the framework's own exit is no model step
    assert [c.tool for c in calls] == ["find_file", "open", "edit", "bash", "bash"]
    assert [c.effect for c in calls] == ["read", "unknown", "write", "unknown", "unknown"]
    assert [c.status for c in calls] == ["ok", "ok", "error", "error", "ok"]
