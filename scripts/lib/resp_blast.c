/* resp_blast: drives one Redis with fixed requests over C connections, each with one request in
 * flight, until N requests have been answered. A request is one or more steps, one round trip
 * each (a comma-separated list of files of RESP bytes: one command, a pipeline, MULTI..EXEC),
 * with the number of replies each step gets; every later answer to a step must be as long as
 * the first, which is printed. Prints requests/s. A lean C client, so that the client shares
 * the cores with the server as little as it can.
 * Usage: resp_blast PORT CONNS REQUESTS REPLIES[,REPLIES...] FILE[,FILE...] */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Length of one complete RESP2 reply at b[0..n), or -1 when incomplete. */
static long reply_len(const char *b, long n) {
  if (n < 1) return -1;
  const char *e = memchr(b, '\n', n);
  if (!e) return -1;
  long head = e - b + 1;
  long v = atol(b + 1);
  switch (b[0]) {
  case '+': case '-': case ':': return head;
  case '$': if (v < 0) return head; return n >= head + v + 2 ? head + v + 2 : -1;
  case '*': {
    if (v < 0) return head;
    long at = head;
    for (long i = 0; i < v; i++) {
      long l = reply_len(b + at, n - at);
      if (l < 0) return -1;
      at += l;
    }
    return at;
  }
  }
  fprintf(stderr, "bad reply byte %c\n", b[0]);
  exit(2);
}

int main(int argc, char **argv) {
  if (argc != 6) { fprintf(stderr, "usage: resp_blast PORT CONNS REQUESTS REPLIES[,REPLIES...] FILE[,FILE...]\n"); return 2; }
  int port = atoi(argv[1]), conns = atoi(argv[2]);
  long total = atol(argv[3]);

  static char blobs[8][1 << 16];
  long blens[8], wants[8], nrep[8];
  int steps = 0;
  char *files = argv[5], *counts = argv[4];
  for (char *tok = strtok(files, ","); tok; tok = strtok(NULL, ",")) {
    FILE *g = fopen(tok, "rb");
    if (!g) { perror(tok); return 2; }
    blens[steps] = fread(blobs[steps], 1, sizeof blobs[steps], g);
    fclose(g);
    steps++;
  }
  for (int i = 0; i < steps; i++) { nrep[i] = atol(counts); char *c = strchr(counts, ','); if (c) counts = c + 1; }
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  int *fd = calloc(conns, sizeof(int));
  long *got = calloc(conns, sizeof(long));
  struct pollfd *p = calloc(conns, sizeof(struct pollfd));
  static char buf[1 << 16];
  for (int i = 0; i < conns; i++) {
    fd[i] = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd[i], (struct sockaddr *)&a, sizeof a)) { perror("connect"); return 2; }
  }
  for (int st = 0; st < steps; st++) {
    long replies = nrep[st];
    if (write(fd[0], blobs[st], blens[st]) != blens[st]) { perror("write"); return 2; }
    long have = 0, want = -1;
    for (;;) {
      long r = read(fd[0], buf + have, sizeof buf - have);
      if (r <= 0) { perror("read"); return 2; }
      have += r;
      long at = 0, k = 0, l;
      while (k < replies && (l = reply_len(buf + at, have - at)) >= 0) { at += l; k++; }
      if (k == replies) { want = at; break; }
    }
    if (have != want) { fprintf(stderr, "more bytes than %ld replies\n", replies); return 2; }
    wants[st] = want;
    fprintf(stderr, "answer %d (%ld bytes): ", st, want);
    for (long i = 0; i < want && i < 300; i++) fputc(buf[i] == '\r' || buf[i] == '\n' ? ' ' : buf[i], stderr);
    fputc('\n', stderr);
  }
  int *step = calloc(conns, sizeof(int));
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  long sent = 0, done = 0;
  for (int i = 0; i < conns && sent < total; i++, sent++) {
    if (write(fd[i], blobs[0], blens[0]) != blens[0]) { perror("write"); return 2; }
    got[i] = 0;
  }
  while (done < total) {
    for (int i = 0; i < conns; i++) { p[i].fd = fd[i]; p[i].events = POLLIN; }
    if (poll(p, conns, 10000) <= 0) { fprintf(stderr, "no answer in 10 s\n"); return 2; }
    for (int i = 0; i < conns; i++) {
      if (!(p[i].revents & POLLIN)) continue;
      long r = read(fd[i], buf, sizeof buf);
      if (r <= 0) { perror("read"); return 2; }
      got[i] += r;
      if (got[i] > wants[step[i]]) { fprintf(stderr, "answer longer than the first\n"); return 2; }
      if (got[i] == wants[step[i]]) {
        got[i] = 0;
        if (++step[i] < steps) {
          if (write(fd[i], blobs[step[i]], blens[step[i]]) != blens[step[i]]) { perror("write"); return 2; }
          continue;
        }
        step[i] = 0;
        done++;
        if (sent < total) {
          if (write(fd[i], blobs[0], blens[0]) != blens[0]) { perror("write"); return 2; }
          sent++;
        }
      }
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
  printf("%.0f\n", total / s);
  return 0;
}
