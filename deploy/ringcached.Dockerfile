# ringcached in an empty image. The binary is built on the host by up.sh
# (CGO_ENABLED=0, so it is static) because this machine pulls no base image.
# Build context: deploy/.build (see up.sh).
FROM scratch
COPY ringcached /ringcached
# Nobody: the daemon writes no file, so it needs no user of its own.
USER 65534:65534
EXPOSE 8080
# There is no shell or curl in the image: the binary checks its own /readyz.
HEALTHCHECK --interval=5s --timeout=2s --start-period=10s --retries=3 \
	CMD ["/ringcached", "healthcheck"]
ENTRYPOINT ["/ringcached"]
