/* rdmacm-abi/tests/mpi.rs: a ping-pong between rank 0 and every other
 * rank, MPI_Allreduce and MPI_Alltoall, each result checked; prints
 * "rank R of N ok" only when all of it was right. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    enum { N = 4096, ROUNDS = 100 };
    int *buf = malloc(N * sizeof(int)), *out = malloc(N * sizeof(int));
    /* ping-pong between rank 0 and every other rank, data checked */
    for (int peer = 1; peer < size; peer++) {
        for (int r = 0; r < ROUNDS; r++) {
            if (rank == 0) {
                for (int i = 0; i < N; i++) buf[i] = r * 31 + i + peer;
                MPI_Send(buf, N, MPI_INT, peer, r, MPI_COMM_WORLD);
                MPI_Recv(out, N, MPI_INT, peer, r, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                for (int i = 0; i < N; i++)
                    if (out[i] != buf[i] + 1) { fprintf(stderr, "pingpong %d round %d: [%d] %d != %d\n", peer, r, i, out[i], buf[i] + 1); MPI_Abort(MPI_COMM_WORLD, 2); }
            } else if (rank == peer) {
                MPI_Recv(buf, N, MPI_INT, 0, r, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                for (int i = 0; i < N; i++) buf[i] += 1;
                MPI_Send(buf, N, MPI_INT, 0, r, MPI_COMM_WORLD);
            }
        }
    }
    /* allreduce: sum over ranks of (rank+1)*(i+1) = (i+1)*size*(size+1)/2 */
    for (int i = 0; i < N; i++) buf[i] = (rank + 1) * (i + 1);
    MPI_Allreduce(buf, out, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < N; i++)
        if (out[i] != (i + 1) * size * (size + 1) / 2) { fprintf(stderr, "allreduce [%d] %d\n", i, out[i]); MPI_Abort(MPI_COMM_WORLD, 3); }
    /* alltoall: block j of rank r holds r*1000+j; after, block j holds j*1000+r */
    int per = N / size;
    for (int j = 0; j < size; j++) for (int k = 0; k < per; k++) buf[j * per + k] = rank * 1000 + j;
    MPI_Alltoall(buf, per, MPI_INT, out, per, MPI_INT, MPI_COMM_WORLD);
    for (int j = 0; j < size; j++) for (int k = 0; k < per; k++)
        if (out[j * per + k] != j * 1000 + rank) { fprintf(stderr, "alltoall block %d: %d\n", j, out[j * per + k]); MPI_Abort(MPI_COMM_WORLD, 4); }
    printf("rank %d of %d ok\n", rank, size);
    MPI_Finalize();
    return 0;
}
