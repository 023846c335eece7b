# The image the manifests in manifests/ run: `preemptguard serve` as user 65532, no shell needed.
FROM python:3.12-slim AS build
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY webhook ./webhook
COPY policies ./policies
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.12-slim
COPY --from=build /install /usr/local
USER 65532:65532
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
EXPOSE 8443 9090
ENTRYPOINT ["preemptguard"]
CMD ["serve", "--cert-file=/tls/tls.crt", "--key-file=/tls/tls.key"]
