"""Rich tables and the JSON documents the commands print; pure formatting, the figures come from the core:
``tables`` (plans, ``--explain``, GPUs, parallel plans; the table helpers), ``cost`` (``cost``'s table),
``serving`` (``plan --inference`` and ``cost --inference``), ``runs`` (``runs`` and ``runs compare``)."""
