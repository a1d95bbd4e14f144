"""Deployment artefacts, rendered from a job spec and checked before they are written.

- :mod:`~paddlefit.deploy.image`: ``build_image(ImageRequest)`` behind ``paddlefit image``, on
  :mod:`~paddlefit.deploy.docker` (the official base image the host driver runs, Dockerfile, `docker run` line).
- :mod:`~paddlefit.deploy.targets`: ``launch(LaunchRequest)`` behind ``paddlefit launch``: per-node scripts
  (local, ssh), a SkyPilot task, a Kubeflow PaddleJob; on :mod:`~paddlefit.deploy.launch` (node commands,
  SkyPilot schema checks) and :mod:`~paddlefit.deploy.kubeflow` (PaddleJob manifest, CRD checks).
"""
