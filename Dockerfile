# The image the manifests in manifests/ run: `preemptguard serve` as user 65532, no shell needed.
# Both stages start from the same exact Python release; `make pin-image` adds the tag's digest.
FROM python:3.12.16-slim-trixie AS build
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Every dependency from the hashed locks (make lock): what compiles the engine into this stage,
# the runtime into /install (--ignore-installed: also what this stage already has).
COPY requirements.lock requirements-build.lock ./
RUN pip install --no-cache-dir --require-hashes -r requirements-build.lock \
    && pip install --no-cache-dir --require-hashes --ignore-installed --prefix=/install \
       -r requirements.lock
COPY pyproject.toml setup.py README.md LICENSE ./
COPY webhook ./webhook
COPY policies ./policies
# The engine compiled with mypyc (setup.py): mypy type-checks it against jsonpointer's types
# while compiling, so both stay in this stage, as does the C compiler.
RUN PREEMPTGUARD_COMPILE=1 pip install --no-cache-dir --no-deps --no-build-isolation \
       --prefix=/install . \
    && PYTHONPATH=$(echo /install/lib/python3*/site-packages) python -c \
       'from webhook.native import engine_build; assert engine_build() == "compiled"'

FROM python:3.12.16-slim-trixie
COPY --from=build /install /usr/local
USER 65532:65532
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
EXPOSE 8443 9090
ENTRYPOINT ["preemptguard"]
CMD ["serve", "--cert-file=/tls/tls.crt", "--key-file=/tls/tls.key"]
