"""The processes paddlefit starts and how they end: ``isolation`` (one function in a child process under a time and
memory limit; ``pid_alive``), ``memlimit`` (that child's memory limit), ``safepath`` (Python children without the
current directory on ``sys.path``), ``quietstart`` (signals during start-up: one line and the scheduler's exit code),
``mklpath`` (MKL's AVX2 code path on AMD CPUs for the Paddle processes)."""
