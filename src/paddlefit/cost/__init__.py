"""The cost of a training job on cloud instances: on-demand, and spot with lost work, restarts and checkpoint writes.

Modules: ``request`` (:class:`~paddlefit.cost.request.CostRequest`, the ``cost`` command's options), ``spot_risk``
(interruption rates: published, given, or the default), ``checkpoint_interval`` (Young's and Daly's optimal
intervals, also used by ``train``'s automatic checkpoint interval), ``instances``
(:func:`~paddlefit.cost.instances.build_cost`: every priced instance type, ranked, with the Pareto front), ``job``
(:func:`~paddlefit.cost.job.cost_job`: what the ``cost`` command calls).
"""
