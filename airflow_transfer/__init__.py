"""airflow-transfer: tuned, verified, resumable dataset transfers for Apache Airflow.

Importing this package is cheap: nothing from Airflow, pyarrow or paramiko is
imported here, so the CLI and Airflow's provider discovery stay fast.
"""

__version__ = "0.1.0"
