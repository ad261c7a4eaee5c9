/* pi by the midpoint rule, split over the ranks of an MPI job: each rank sums every
 * size-th term, rank 0 reduces and prints. The example program of examples/mpi.
 *
 *     mpicc -O2 -o pi pi.c
 *     python -m examples.mpi --master HOST:PORT --ranks 4 -- ./pi 100000000
 *
 * Options (for trying failures): --sleep S, every rank waits S seconds before it
 * computes; --die R, rank R exits with status 3 instead of computing (the others
 * then wait in the reduction until the job is torn down).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long n = 10000000;
    int die = -1;
    double pause = 0;
    int rank, size;
    char host[256] = "?";

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--die") && i + 1 < argc) die = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sleep") && i + 1 < argc) pause = atof(argv[++i]);
        else n = atol(argv[i]);
    }
    gethostname(host, sizeof host);
    printf("rank %d of %d: host %s, pid %d\n", rank, size, host, (int)getpid());
    fflush(stdout);
    if (pause > 0) usleep((useconds_t)(pause * 1e6));
    if (rank == die) {
        fprintf(stderr, "rank %d: dying as asked (--die)\n", rank);
        exit(3);
    }
    double sum = 0, total = 0;
    for (long i = rank; i < n; i += size) {
        double x = (i + 0.5) / n;
        sum += 4.0 / (1.0 + x * x);
    }
    MPI_Reduce(&sum, &total, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("pi = %.12f (%ld terms, %d ranks)\n", total / n, n, size);
    MPI_Finalize();
    return 0;
}
