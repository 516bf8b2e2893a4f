"""The ``paddlecloud`` command line (Click + Rich); it talks to the platform only through the SDK."""
