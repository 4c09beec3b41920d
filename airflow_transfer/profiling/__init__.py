"""Running the profilers on hosts and feeding the tuning library (paper 003, Fig. 4.1).

hosts.py   which host a name means, and its key in the library
remote.py  one profiler run on one host: locally, or the module piped over SSH exec
links.py   the network profile of one ordered host pair (sink on one end, client on the other)
library.py profile hosts/pairs, run the tuner, write profiles and tuned parameters to the store

Airflow-free: the `profile` command and the profiling DAG both call library.py.
"""
