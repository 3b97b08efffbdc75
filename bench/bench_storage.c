/* bench_storage.c: glmchat storage benchmark (placeholder until the measured version lands). */
int main(void)
{
    return 0;
}
