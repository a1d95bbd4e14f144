"""Deployment artefacts: Dockerfile and `docker run` line (more targets later)."""
