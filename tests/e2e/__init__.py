"""The project from outside: CLIs a newcomer meets, installs, Docker, shipped configs, the learning
pipeline and training end to end, launch scripts, and the code-shape rule."""
