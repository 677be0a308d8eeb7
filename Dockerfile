# The stream worker image: `docker compose up` builds it; `stallwatch worker` is its command.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY stallwatch ./stallwatch
RUN pip install --no-cache-dir '.[worker]'
USER nobody
EXPOSE 9401 9400
CMD ["stallwatch", "worker"]
