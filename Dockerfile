# The PaddleCloud image: the API server (`paddlecloud up`), the Kubernetes operator, and the fetch /
# wait init containers of job pods; it also serves as a plain job image (python3 + pip).
#   docker build -t paddlecloud:0.1.0 .        (deploy/kubernetes/README.md)
FROM python:3.11-slim

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1

# uid 1000: the user job pods and the API server run as (backends/kubernetes/pods.py RUN_AS)
RUN useradd --uid 1000 --user-group --create-home paddlecloud

WORKDIR /opt/paddlecloud
COPY pyproject.toml README.md ./
COPY src ./src
# the optional extras: the Kubernetes client and kopf (backend, operator), PostgreSQL's driver
RUN pip install ".[kubernetes,postgres]" && rm -rf /opt/paddlecloud/src /root/.cache

USER 1000
WORKDIR /home/paddlecloud
EXPOSE 8080
CMD ["paddlecloud", "up", "--host", "0.0.0.0", "--port", "8080"]
