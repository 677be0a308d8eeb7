"""Secret masking in coder labels, against command lines as agents really type them, and its cost:
the label is cut before it is matched, so no command's length sets the work."""

from __future__ import annotations

import time

import pytest

from stallwatch.engine.rules.workspace import call_label

SECRET = "hunter22Zq"

# (command, what the label must still show): the command's shape stays, the secret goes.
COMMANDS = [
    (f"sshpass -p {SECRET} ssh deploy@10.0.0.4 uptime", "sshpass -p *** ssh deploy@10.0.0.4"),
    (f"sshpass -p '{SECRET}' scp build.tgz ci@host:/tmp", "sshpass -p *** scp"),
    (f"sshpass -p{SECRET} ssh root@box", "sshpass -p"),
    (f"export OPENAI_API_KEY={SECRET}", "export OPENAI_API_KEY=***"),
    (f'export ANTHROPIC_API_KEY="{SECRET}" && python agent.py', "export ANTHROPIC_API_KEY=***"),
    (f"OPENAI_API_KEY={SECRET} python eval.py", "OPENAI_API_KEY=*** python eval.py"),
    (f"export GITHUB_TOKEN={SECRET}", "export GITHUB_TOKEN=***"),
    (f"export AWS_SECRET_ACCESS_KEY={SECRET}", "export AWS_SECRET_ACCESS_KEY=***"),
    (f"aws configure set aws_secret_access_key {SECRET}", "aws configure set aws_secret_access_key ***"),
    (f'curl -H "Cookie: session={SECRET}; csrftoken={SECRET}" https://app/api', 'curl -H "Cookie: ***"'),
    (f"curl -b 'sessionid={SECRET}' https://app/admin", "curl -b *** https://app/admin"),
    (f"curl --cookie sid={SECRET} https://app", "curl --cookie *** https://app"),
    (f'curl -H "Authorization: Bearer {SECRET}{SECRET}" https://api', "curl -H"),
    (f'curl -H "X-Api-Key: {SECRET}" https://api', "curl -H"),
    (f'curl -H "PRIVATE-TOKEN: {SECRET}" https://gitlab/api', "curl -H"),
    (f"curl -u admin:{SECRET} https://api", "curl -u *** https://api"),
    (f"curl 'https://api/v1?api_key={SECRET}&q=1'", "curl"),
    (f"git clone https://bot:{SECRET}@github.com/org/repo", "git clone https://***@github.com/org/repo"),
    (f"docker login -u ci -p {SECRET} registry.example", "docker login -u ci -p *** registry.example"),
    (f"docker login --password {SECRET} ghcr.io", "docker login --password *** ghcr.io"),
    (f"redis-cli -h cache -a {SECRET} ping", "redis-cli -h cache -a *** ping"),
    (f"mysql -uroot -p{SECRET} shop", "mysql -uroot -p*** shop"),
    (f"PGPASSWORD={SECRET} psql -h db -U app", "PGPASSWORD=*** psql -h db -U app"),
    (f"MYSQL_PWD={SECRET} mysqldump shop", "MYSQL_PWD=*** mysqldump shop"),
    (f"deploy --token {SECRET} --region eu", "deploy --token *** --region eu"),
    (f"vault login -method=userpass username=me password={SECRET}", "password=***"),
    (f"openssl enc -aes-256-cbc -pass pass:{SECRET} -in a", "openssl enc -aes-256-cbc"),
    (f"pip install --index-url https://u:{SECRET}@pypi.corp/simple pkg", "https://***@pypi.corp"),
    ("huggingface-cli login --token hf_" + SECRET * 2, "huggingface-cli login --token ***"),
    ("echo sk-ant-" + SECRET * 2 + " > key.txt", "echo *** > key.txt"),
    ("git remote set-url origin https://ghp_" + SECRET * 2 + "@github.com/o/r", "git remote set-url"),
    ("npm config set //registry.npmjs.org/:_authToken npm_" + SECRET * 2, "npm config set"),
]


@pytest.mark.parametrize("command, shown", COMMANDS)
def test_a_label_keeps_the_commands_shape_and_drops_its_secret(command, shown):
    label = call_label("bash", {"command": command})
    assert SECRET not in label and SECRET[:6] not in label, label
    assert shown in label, label


# Commands with no secret keep every word (the masking must not eat ordinary options).
PLAIN = [
    "python -m pytest -p no:cacheprovider tests",
    "grep -rn password src/",
    "docker run -p 8080:80 nginx",
    "ls -la ~/.ssh",
    "cat cookies.txt",
]


@pytest.mark.parametrize("command", PLAIN)
def test_a_label_without_a_secret_is_the_command(command):
    assert call_label("bash", {"command": command}) == command


@pytest.mark.parametrize(
    "command",
    [
        "pass" * 225_000,  # one 900 KB word: masking before cutting took minutes
        "x -p" + "a" * 900_000,
        "Cookie: " + "a=b;" * 225_000,
        "sshpass " + "-e " * 300_000,
        " " * 900_000 + "ls",
    ],
)
def test_a_labels_cost_does_not_depend_on_the_commands_length(command):
    started = time.process_time()
    label = call_label("bash", {"command": command})
    # Linear work over a bounded prefix: microseconds; the bound leaves room for a loaded machine.
    assert time.process_time() - started < 0.05, len(command)
    assert len(label) <= 80
