"""Provider metadata for Airflow's provider discovery (entry point apache_airflow_provider)."""

from __future__ import annotations

from . import __version__

# The connection type this provider registers, read by hooks/endpoint.py (TransferEndpointHook).
# Its own type rather than Airflow's "sftp": that one belongs to the SFTP provider, whose Test
# button uses SSHHook's rules (no host key check unless told), not the ones a copy follows.
CONN_TYPE = "airflow_transfer"
HOOK_NAME = "SFTP (airflow-transfer)"


def _text(label: str, description: str, **schema) -> dict:
    return {"label": label, "description": description, "schema": {"type": ["string", "null"], **schema}}


# The form's extra fields, stored in the connection's extra under these names: the names
# SSHHook connections use too, so an ssh or sftp connection's extra reads the same.
CONN_FIELDS = {
    "key_file": _text(
        "Private key file",
        "Path of the private key on the workers, e.g. ~/.ssh/id_ed25519. Empty, with no password "
        "and no key text either: the worker user's default keys.",
    ),
    "private_key": _text(
        "Private key (text)",
        "The private key itself (OpenSSH or PEM text), for keys kept in Airflow rather than on the workers.",
        format="multiline",
    ),
    "private_key_passphrase": _text(
        "Key passphrase", "Passphrase of the private key, if it has one.", format="password"
    ),
    "known_hosts": _text(
        "Known hosts file",
        "File on the workers that lists the server's host key (default ~/.ssh/known_hosts).",
    ),
    "host_key": _text(
        "Host key (pinned)",
        "The server's public key, e.g. 'ssh-ed25519 AAAA...' (ssh-keyscan prints it): only this key is accepted.",
    ),
    "no_host_key_check": {
        "label": "Do not check the host key",
        "description": "Accept any host key: only for throwaway test servers.",
        "schema": {"type": ["boolean", "null"], "default": False},
    },
    "ssh_client": _text(
        "SSH client",
        "What carries the data connections: paramiko (default), openssh (the ssh command) or auto.",
        enum=["paramiko", "openssh", "auto", None],
    ),
    "conn_timeout": {
        "label": "Connect timeout (s)",
        "description": "Seconds to wait for the server (and each jump host) to accept the connection.",
        "schema": {"type": ["number", "null"], "minimum": 1},
    },
    "proxy_jump": _text(
        "Jump host(s)",
        "Reach the host through a bastion, as OpenSSH's ProxyJump: [user@]host[:port], comma-separated "
        "for a chain. Empty: the workers' ~/.ssh/config decides.",
    ),
    "proxy_command": _text(
        "Proxy command",
        "A command whose stdin/stdout carry the connection, as OpenSSH's ProxyCommand (%h, %p, %r expanded).",
    ),
    "disabled_algorithms": _text(
        "Disabled algorithms",
        'JSON as SSHHook takes it, e.g. {"ciphers": ["aes128-cbc"]}: algorithms never offered.',
    ),
    "stall_timeout": {
        "label": "Stall timeout (s)",
        "description": "Seconds an SFTP request may go unanswered before the connection counts as lost (default 120).",
        "schema": {"type": ["number", "null"], "minimum": 1},
    },
}


def get_provider_info() -> dict:
    return {
        "package-name": "airflow-transfer",
        "name": "airflow-transfer",
        "description": "Tuned (pp/p/cc), verified, resumable dataset transfers over SFTP and more.",
        "versions": [__version__],
        "connection-types": [
            {
                "connection-type": CONN_TYPE,
                "hook-class-name": "airflow_transfer.hooks.endpoint.TransferEndpointHook",
                "hook-name": HOOK_NAME,
                "ui-field-behaviour": {
                    "hidden-fields": ["schema"],  # a copy names its paths itself
                    "relabeling": {"login": "Username"},
                    "placeholders": {"host": "sftp.example.org", "port": "22", "login": "the remote user"},
                },
                "conn-fields": CONN_FIELDS,
            }
        ],
        "operators": [
            {
                "integration-name": "airflow-transfer",
                "python-modules": [
                    "airflow_transfer.operators.transfer",
                    "airflow_transfer.operators.query",
                    "airflow_transfer.operators.chunked",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": "airflow-transfer",
                "python-modules": ["airflow_transfer.sensors.stable", "airflow_transfer.sensors.protocols"],
            }
        ],
        "triggers": [
            {
                "integration-name": "airflow-transfer",
                "python-modules": ["airflow_transfer.triggers.stable", "airflow_transfer.triggers.protocols"],
            }
        ],
        "hooks": [{"integration-name": "airflow-transfer", "python-modules": ["airflow_transfer.hooks.endpoint"]}],
        "extra-links": ["airflow_transfer.plugins.links.TransferPageLink"],
        "integrations": [
            {
                "integration-name": "airflow-transfer",
                "external-doc-url": "https://airflow.apache.org",
                "tags": ["protocol"],
            }
        ],
        # Declared so Airflow knows store_url may hold a database password: "sensitive" makes
        # `airflow config list` and the UI's configuration page hide it, and Airflow masks it in logs.
        "config": {
            "airflow_transfer": {
                "description": "airflow-transfer: where journals, history and the tuning library are kept.",
                "options": {
                    "store_url": {
                        "description": "SQLAlchemy URL of the store (SQLite or PostgreSQL); default: SQLite "
                        "under $AIRFLOW_HOME (docs/store.md).",
                        "version_added": None,
                        "type": "string",
                        "sensitive": True,
                        "example": "postgresql+psycopg://transfer:secret@db.example.org/transfers",
                        "default": None,
                    },
                    "staging_dir": {
                        "description": "Directory for staged manifests of chunked DAGs; every worker that "
                        "runs chunks must read it.",
                        "version_added": None,
                        "type": "string",
                        "example": None,
                        "default": None,
                    },
                },
            },
        },
    }
