# A single-member etcd in an empty image: the etcd binary is built on the host
# by up.sh from go.etcd.io/etcd/server/v3 at the version pinned in go.mod
# (a tool directive keeps it in go.sum). ringcached comes along only to serve
# as the health check, since there is no shell or curl in here.
# Build context: deploy/.build (see up.sh).
FROM scratch
COPY etcd /etcd
COPY ringcached /ringcached
# An empty directory owned by nobody: Docker seeds a new named volume mounted
# on /data with it, ownership included, so etcd need not run as root.
COPY --chown=65534:65534 data/ /data/
USER 65534:65534
EXPOSE 2379
HEALTHCHECK --interval=2s --timeout=2s --start-period=10s --retries=3 \
	CMD ["/ringcached", "healthcheck", "-url", "http://127.0.0.1:2379/health"]
ENTRYPOINT ["/etcd"]
CMD ["--name=etcd", "--data-dir=/data/etcd", \
	"--listen-client-urls=http://0.0.0.0:2379", "--advertise-client-urls=http://etcd:2379", \
	"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380", \
	"--initial-cluster=etcd=http://127.0.0.1:2380", "--log-level=warn"]
